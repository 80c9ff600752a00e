//! Tool calling on fixed model outputs: definitions checked, calls recognised whole and
//! streamed in any pieces, the forced-call grammar, the prompt in both forms.

use super::*;
use crate::template::ChatTemplate;
use serde_json::{json, Value};

fn weather() -> ToolDef {
    ToolDef {
        name: "get_weather".into(),
        description: Some("The weather in a city".into()),
        parameters: Some(json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
            },
            "required": ["city"]
        })),
    }
}

fn clock() -> ToolDef {
    ToolDef {
        name: "get_time".into(),
        description: None,
        parameters: None,
    }
}

fn tools(choice: ToolChoice, parallel: bool) -> Tools {
    Tools::new(vec![weather(), clock()], choice, parallel).unwrap()
}

fn refused(defs: Vec<ToolDef>, choice: ToolChoice) -> String {
    Tools::new(defs, choice, true).unwrap_err().to_string()
}

#[test]
fn bad_definitions_are_refused_naming_the_tool() {
    let named = |name: &str| ToolDef {
        name: name.into(),
        ..clock()
    };
    assert!(
        refused(vec![named("get weather")], ToolChoice::Auto).contains("tools[0] ('get weather')")
    );
    assert!(refused(vec![clock(), clock()], ToolChoice::Auto)
        .contains("tools[1] ('get_time'): another"));
    let with = |parameters: Value| ToolDef {
        parameters: Some(parameters),
        ..weather()
    };
    let e = refused(vec![clock(), with(json!([1]))], ToolChoice::Auto);
    assert!(
        e.contains("tools[1] ('get_weather'): parameters must be a JSON Schema object"),
        "{e}"
    );
    let e = refused(vec![with(json!({"type": "string"}))], ToolChoice::Auto);
    assert!(e.contains("describe an object"), "{e}");
    let big: serde_json::Map<String, Value> = (0..800)
        .map(|i| (format!("field_{i}"), json!({"type": "string"})))
        .collect();
    let e = refused(
        vec![with(json!({"type": "object", "properties": big}))],
        ToolChoice::Auto,
    );
    assert!(
        e.contains("('get_weather'): parameters is") && e.contains("at most 16384"),
        "{e}"
    );
    let e = refused(
        vec![with(
            json!({"type": "object", "properties": {"x": {"type": "string", "not": {}}}}),
        )],
        ToolChoice::Auto,
    );
    assert!(
        e.contains("('get_weather'): parameters.properties.x.not"),
        "{e}"
    );
    let e = refused(
        vec![with(
            json!({"type": "object", "properties": {"x": {"type": 12}}}),
        )],
        ToolChoice::Auto,
    );
    assert!(
        e.contains("('get_weather'): parameters is not a valid JSON Schema"),
        "{e}"
    );
    assert!(refused(vec![], ToolChoice::Required).contains("'required' needs tools"));
    assert!(refused(vec![clock()], ToolChoice::Function("nope".into()))
        .contains("no tool is named 'nope'"));
}

/// The calls of a parse without their random ids.
fn calls(p: &Parsed) -> Vec<(String, String)> {
    p.calls
        .iter()
        .map(|c| (c.name.clone(), c.arguments.clone()))
        .collect()
}

fn call(name: &str, arguments: &str) -> (String, String) {
    (name.into(), arguments.into())
}

#[test]
fn hermes_blocks_are_calls_when_valid() {
    let t = tools(ToolChoice::Auto, true);
    let p = t.parse(
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\n",
    );
    assert_eq!(p.content, "Let me check.");
    assert_eq!(
        calls(&p),
        vec![
            call("get_weather", r#"{"city": "Paris"}"#),
            call("get_time", "{}")
        ]
    );
    assert!(p.calls[0].id.starts_with("call_") && p.calls[0].id.len() == 29);
    assert_ne!(p.calls[0].id, p.calls[1].id);
    // Arguments as a JSON string holding the object; "parameters" for "arguments".
    let p = t.parse(
        r#"<tool_call>{"name": "get_weather", "parameters": "{\"city\": \"Oslo\"}"}</tool_call>"#,
    );
    assert_eq!(calls(&p), vec![call("get_weather", r#"{"city": "Oslo"}"#)]);
    // Invalid: an unknown tool, arguments against the schema, not JSON. They stay text.
    for bad in [
        r#"<tool_call>{"name": "get_news", "arguments": {}}</tool_call>"#,
        r#"<tool_call>{"name": "get_weather", "arguments": {"unit": "kelvin"}}</tool_call>"#,
        r#"<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"</tool_call>"#,
    ] {
        let p = t.parse(bad);
        assert!(p.calls.is_empty(), "{bad}");
        assert_eq!(p.content, bad);
    }
    // An unclosed block at the end still counts (models stop at the end of their turn).
    let p = t.parse(r#"<tool_call>{"name": "get_time", "arguments": {}}"#);
    assert_eq!(calls(&p), vec![call("get_time", "{}")]);
    // One call at most without parallel calls.
    let single = tools(ToolChoice::Auto, false);
    let p = single.parse("<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call><tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
    assert_eq!(p.calls.len(), 1);
}

#[test]
fn bare_json_answers_are_calls_when_valid() {
    let t = tools(ToolChoice::Auto, true);
    let p = t.parse(" {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}\n");
    assert_eq!(calls(&p), vec![call("get_weather", r#"{"city":"Lima"}"#)]);
    assert_eq!(p.content, "");
    let p = t.parse("```json\n[{\"name\": \"get_time\", \"arguments\": {}}, {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Kyiv\"}}]\n```");
    assert_eq!(p.calls.len(), 2);
    // JSON that is not a call, and plain text (also text that starts like a fence).
    for text in [
        "{\"answer\": 42}",
        "[1, 2]",
        "```python\nprint(1)\n```",
        "The weather is fine.",
        "",
    ] {
        let p = t.parse(text);
        assert!(p.calls.is_empty(), "{text}");
        assert_eq!(p.content, text);
    }
    // Tools not offered: everything is text.
    let none = tools(ToolChoice::None, true);
    let text = r#"<tool_call>{"name": "get_time", "arguments": {}}</tool_call>"#;
    assert_eq!(none.parse(text).content, text);
}

/// Feeds `text` to a stream in pieces of `size` bytes (at character boundaries).
fn streamed(t: &Tools, text: &str, size: usize) -> (Vec<StreamEvent>, Parsed) {
    let mut s = t.stream();
    let mut events = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        events.extend(s.push(&rest[..cut]));
        rest = &rest[cut..];
    }
    events.extend(s.finish());
    (events.clone(), Parsed::from_events(events))
}

const ANSWERS: [&str; 8] = [
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>\nDone.",
    "No tools needed: 2 < 3 and <b>bold</b> <tool_ is not a tag.\n\n",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lima\"}}",
    "{\"not\": \"a call\"}",
    "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"kelvin\"}}</tool_call> text",
    "Héllo wörld ✓ <tool_call>{\"name\": \"get_time\", \"arguments\": {}}",
    "   \n",
    "```json\n{\"name\": \"get_time\", \"arguments\": {}}\n```",
];

#[test]
fn any_split_of_an_answer_streams_to_the_same_answer() {
    for parallel in [true, false] {
        let t = tools(ToolChoice::Auto, parallel);
        for text in ANSWERS {
            let whole = t.parse(text);
            for size in [1, 2, 3, 5, 7, 13, 64] {
                let (_, parts) = streamed(&t, text, size);
                assert_eq!(parts.content, whole.content, "{text:?} in pieces of {size}");
                assert_eq!(calls(&parts), calls(&whole), "{text:?} in pieces of {size}");
            }
        }
    }
}

#[test]
fn text_streams_at_once_and_calls_when_complete() {
    let t = tools(ToolChoice::Auto, true);
    let mut s = t.stream();
    assert_eq!(
        s.push("The answer"),
        vec![StreamEvent::Content("The answer".into())]
    );
    // Held: what may start a tag, and whitespace that may precede one.
    assert_eq!(
        s.push(" is\n<tool"),
        vec![StreamEvent::Content(" is".into())]
    );
    assert_eq!(s.push("_call>{\"name\": \"get_time\", "), vec![]);
    let events = s.push("\"arguments\": {}}</tool_call>");
    assert!(
        matches!(&events[0], StreamEvent::CallStart { index: 0, name, .. } if name == "get_time")
    );
    assert_eq!(
        events[1],
        StreamEvent::Arguments {
            index: 0,
            fragment: "{}".into()
        }
    );
    assert_eq!(s.finish(), vec![]);
}

#[test]
fn a_forced_call_streams_its_name_then_its_arguments() {
    let t = tools(ToolChoice::Required, true);
    let mut s = t.stream();
    assert_eq!(s.push("<tool_call>\n{\"name\": \"get_wea"), vec![]);
    let e = s.push("ther\"");
    assert!(
        matches!(&e[0], StreamEvent::CallStart { index: 0, name, .. } if name == "get_weather")
    );
    let e = s.push(", \"arguments\": {\"ci");
    assert_eq!(
        e[0],
        StreamEvent::Arguments {
            index: 0,
            fragment: "{\"ci".into()
        }
    );
    let e = s.push("ty\": \"Rome\"}}\n</tool_call>");
    assert_eq!(
        e,
        vec![StreamEvent::Arguments {
            index: 0,
            fragment: "ty\": \"Rome\"}".into()
        }]
    );
    // In any pieces, the same calls as the whole text.
    let text = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"unit\": \"celsius\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
    let whole = t.parse(text);
    assert_eq!(whole.calls.len(), 2);
    for size in [1, 2, 4, 9, 100] {
        assert_eq!(calls(&streamed(&t, text, size).1), calls(&whole), "{size}");
    }
}

#[test]
fn the_forced_grammar_holds_blocks_of_the_offered_calls() {
    let g = tools(ToolChoice::Required, true)
        .grammar()
        .unwrap()
        .unwrap();
    assert!(
        g.starts_with("root ::= \"<tool_call>\\n\" tool-call \"\\n</tool_call>\" (\"\\n\""),
        "{g}"
    );
    assert!(g.contains("tool-call ::="), "{g}");
    assert!(g.contains("get_weather") && g.contains("get_time"), "{g}");
    assert!(!g.contains("\nroot ::= \"{\""), "{g}");
    let one = tools(ToolChoice::Function("get_time".into()), true)
        .grammar()
        .unwrap()
        .unwrap();
    assert!(!one.contains("get_weather") && !one.contains(")*"), "{one}");
    assert_eq!(tools(ToolChoice::Auto, true).grammar().unwrap(), None);
    // llama.cpp's own grammar parser accepts them (the sampler is built from them in the
    // real-model test).
}

/// SmolLM2-Instruct's template (no tools), as its GGUF file carries it.
const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// A template that renders tools itself (in the way Qwen2.5's does, shortened).
const WITH_TOOLS: &str = "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}\n{% endif %}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}<call {{ c.function.name }} {{ c.function.arguments | tojson }}>{% endfor %}{% endif %}{% if m.role == 'tool' %}(for {{ m.name }}){% endif %}\n{% endfor %}[assistant]";

fn conversation() -> Vec<Message> {
    vec![
        Message {
            role: "user".into(),
            content: "Weather in Paris?".into(),
            ..Message::default()
        },
        Message {
            role: "assistant".into(),
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: r#"{"city":"Paris"}"#.into(),
            }],
            tool_call_id: None,
        },
        Message {
            role: "tool".into(),
            content: "18 C, sunny".into(),
            tool_call_id: Some("call_1".into()),
            ..Message::default()
        },
    ]
}

#[test]
fn a_template_without_tools_gets_the_generic_form() {
    let template = ChatTemplate::new(Some(SMOLLM2), "<|im_start|>", "<|im_end|>").unwrap();
    assert!(!template.supports_tools());
    let t = tools(ToolChoice::Auto, true);
    let prompt = prompt::render(&template, &conversation(), Some(&t)).unwrap();
    assert!(
        prompt.starts_with("<|im_start|>system\nYou can call functions"),
        "{prompt}"
    );
    assert!(prompt.contains("<tools>\n{\"function\":{\"description\":\"The weather in a city\",\"name\":\"get_weather\""), "{prompt}");
    assert!(prompt.contains("<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|im_end|>"), "{prompt}");
    assert!(
        prompt
            .contains("<|im_start|>user\n<tool_response>\n18 C, sunny\n</tool_response><|im_end|>"),
        "{prompt}"
    );
    assert!(prompt.ends_with("<|im_start|>assistant\n"));
    // A client's system message comes first; no tools offered: no tool text, calls still
    // written (the history is what it is).
    let mut with_system = conversation();
    with_system.insert(
        0,
        Message {
            role: "developer".into(),
            content: "Be brief.".into(),
            ..Message::default()
        },
    );
    let prompt = prompt::render(&template, &with_system, Some(&t)).unwrap();
    assert!(
        prompt.starts_with("<|im_start|>system\nBe brief.\n\nYou can call functions"),
        "{prompt}"
    );
    let none = tools(ToolChoice::None, true);
    let prompt = prompt::render(&template, &conversation(), Some(&none)).unwrap();
    assert!(
        !prompt.contains("<tools>") && prompt.contains("<tool_response>"),
        "{prompt}"
    );
}

#[test]
fn a_template_with_tools_gets_them_and_the_calls_as_objects() {
    let template = ChatTemplate::new(Some(WITH_TOOLS), "", "").unwrap();
    assert!(template.supports_tools());
    let t = tools(ToolChoice::Auto, true);
    let prompt = prompt::render(&template, &conversation(), Some(&t)).unwrap();
    assert_eq!(
        prompt,
        "TOOLS:get_weather;get_time;[user]Weather in Paris?[assistant]<call get_weather {\"city\": \"Paris\"}>[tool]18 C, sunny(for get_weather)[assistant]"
    );
}

#[test]
fn malformed_tool_messages_are_refused() {
    let template = ChatTemplate::new(Some(SMOLLM2), "", "").unwrap();
    let mut m = conversation();
    m[2].tool_call_id = Some("call_9".into());
    let e = prompt::render(&template, &m, None).unwrap_err().to_string();
    assert!(
        e.contains("messages[2]: tool_call_id 'call_9' answers no earlier"),
        "{e}"
    );
    m[2].tool_call_id = None;
    let e = prompt::render(&template, &m, None).unwrap_err().to_string();
    assert!(
        e.contains("messages[2]: a tool message needs tool_call_id"),
        "{e}"
    );
    let mut m = conversation();
    m[1].tool_calls[0].arguments = "Paris".into();
    let e = prompt::render(&template, &m, None).unwrap_err().to_string();
    assert!(
        e.contains("messages[1].tool_calls[0].function.arguments"),
        "{e}"
    );
    let mut m = conversation();
    m[0].tool_calls = m[1].tool_calls.clone();
    let e = prompt::render(&template, &m, None).unwrap_err().to_string();
    assert!(
        e.contains("only assistant messages carry tool_calls"),
        "{e}"
    );
    assert!(prompt::render(&template, &[], None).is_err());
}
