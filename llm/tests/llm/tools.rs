//! Tool calls on the real demo model (`$INFERGATE_MODELS/smollm2.gguf`, whose template has no
//! tools: the generic form): `required` and a named function forced through the grammar give
//! valid calls, streamed pieces add up to the whole answer's calls.

use infergate_llm::{
    Event, Message, Parsed, SamplingParams, StreamEvent, ToolChoice, ToolDef, Tools,
};
use serde_json::{json, Value};
use crate::support::{model, serial};

fn defs() -> Vec<ToolDef> {
    vec![
        ToolDef {
            name: "get_weather".into(),
            description: Some("Get the current weather in a city".into()),
            parameters: Some(json!({
                "type": "object",
                "properties": {
                    "city": {"type": "string", "maxLength": 40},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}
                },
                "required": ["city", "unit"]
            })),
        },
        ToolDef {
            name: "get_time".into(),
            description: Some("Get the current time in a time zone".into()),
            parameters: Some(json!({
                "type": "object",
                "properties": {"zone": {"type": "string", "maxLength": 40}},
                "required": ["zone"]
            })),
        },
    ]
}

/// The answer's text pieces as streamed, and the answer whole.
fn answer(tools: &Tools, question: &str) -> (Vec<String>, String) {
    let m = model();
    let prompt = m
        .render_chat_with_tools(
            &[Message {
                role: "user".into(),
                content: question.into(),
                ..Message::default()
            }],
            Some(tools),
        )
        .unwrap();
    assert!(prompt.contains("<tools>"), "{prompt}");
    let grammar = tools.grammar().unwrap();
    let params = SamplingParams {
        temperature: 0.0,
        max_tokens: 96,
        ..SamplingParams::default()
    };
    let mut g = m
        .generate(&m.tokenize(&prompt), &params, grammar.as_deref())
        .unwrap();
    let mut pieces = Vec::new();
    while let Some(event) = g.events.blocking_recv() {
        match event {
            Event::Text { text, .. } => pieces.push(text),
            Event::Done(_) => break,
            Event::Error(e) => panic!("{e}"),
        }
    }
    let whole = pieces.concat();
    (pieces, whole)
}

fn streamed(tools: &Tools, pieces: &[String]) -> Parsed {
    let mut s = tools.stream();
    let mut events: Vec<StreamEvent> = pieces.iter().flat_map(|p| s.push(p)).collect();
    events.extend(s.finish());
    Parsed::from_events(events)
}

#[test]
fn required_gives_a_valid_call_through_the_grammar() {
    let _serial = serial();
    let tools = Tools::new(defs(), ToolChoice::Required, false).unwrap();
    let (pieces, text) = answer(&tools, "What is the weather like in Paris?");
    let parsed = tools.parse(&text);
    assert_eq!(parsed.calls.len(), 1, "{text:?}");
    let call = &parsed.calls[0];
    let args: Value = serde_json::from_str(&call.arguments).unwrap();
    assert!(
        ["get_weather", "get_time"].contains(&call.name.as_str()),
        "{text:?}"
    );
    assert!(args.is_object(), "{text:?}");
    if call.name == "get_weather" {
        assert!(
            args["city"].is_string() && args["unit"].is_string(),
            "{args}"
        );
    }
    assert!(parsed.content.is_empty(), "{text:?}");
    // Streamed token by token: the same call.
    let s = streamed(&tools, &pieces);
    assert_eq!(
        (s.calls[0].name.as_str(), s.calls[0].arguments.as_str()),
        (call.name.as_str(), call.arguments.as_str())
    );
    eprintln!("required: {text:?}");
}

#[test]
fn a_named_function_is_the_one_called() {
    let _serial = serial();
    let tools = Tools::new(defs(), ToolChoice::Function("get_time".into()), true).unwrap();
    let (_, text) = answer(&tools, "What time is it in Tokyo?");
    let parsed = tools.parse(&text);
    assert_eq!(parsed.calls.len(), 1, "{text:?}");
    assert_eq!(parsed.calls[0].name, "get_time");
    let args: Value = serde_json::from_str(&parsed.calls[0].arguments).unwrap();
    assert!(args["zone"].is_string(), "{args}");
    eprintln!("named: {text:?}");
}
