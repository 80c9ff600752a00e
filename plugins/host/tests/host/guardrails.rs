//! Chat guardrails on the real example components: what pii-mask and blocked-terms decide on
//! prompts, answers and streamed pieces, how an upload's world is told apart, and a hostile
//! guardrail (a loop, a memory hoard, a trap) failing only its own call.

use crate::common::{host, load, load_guardrail, plugin_bytes};
use infergate_plugin_host::{
    ChatText, FaultKind, Guardrail, Loaded, Metadata, PluginError, PluginFault, PromptVerdict,
    TextVerdict,
};

fn message(role: &str, content: &str) -> ChatText {
    ChatText {
        role: role.into(),
        content: content.into(),
    }
}

fn config(json: &str) -> Metadata {
    vec![
        ("model".into(), "chat".into()),
        ("config".into(), json.into()),
    ]
}

/// Feeds `text` to the guardrail in pieces of `size` characters as a host streams an answer:
/// the pending text is what was held back plus the new piece, the verdict covers all of it
/// but what the guardrail holds, and the end of the answer is checked with `last`. Returns
/// the text released, or the refusal's reason.
fn stream(
    guardrail: &Guardrail,
    text: &str,
    size: usize,
    meta: &Metadata,
) -> Result<String, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut released = String::new();
    let mut pending = String::new();
    let pieces: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    for (i, piece) in pieces.iter().enumerate() {
        pending.push_str(piece);
        let last = i + 1 == pieces.len();
        let verdict = guardrail
            .check_stream(&released, &pending, last, meta)
            .expect("stream check");
        let ready = pending.len() - verdict.hold as usize;
        match verdict.verdict {
            TextVerdict::Pass => released.push_str(&pending[..ready]),
            TextVerdict::Rewrite(text) => released.push_str(&text),
            TextVerdict::Refuse(reason) => return Err(reason),
        }
        pending = pending[ready..].to_string();
    }
    assert!(pending.is_empty(), "the last check holds nothing back");
    Ok(released)
}

#[test]
fn pii_mask_rewrites_prompts_answers_and_streams() {
    let host = host();
    let pii = load_guardrail(&host, "pii-mask");
    assert_eq!(pii.description().name, "pii-mask");
    let meta = config("{}");

    let prompt = [
        message("system", "You are helpful."),
        message(
            "user",
            "Mail jane.doe@example.com or call +1 (555) 010-9999; card 4111 1111 1111 1111.",
        ),
    ];
    match pii.check_prompt(&prompt, &meta).expect("prompt check") {
        PromptVerdict::Rewrite(contents) => assert_eq!(
            contents,
            [
                "You are helpful.",
                "Mail [EMAIL] or call [PHONE]; card [CARD]."
            ]
        ),
        other => panic!("expected a rewrite, got {other:?}"),
    }
    let clean = [message("user", "What is 2 + 2 in the year 2024?")];
    assert_eq!(
        pii.check_prompt(&clean, &meta).unwrap(),
        PromptVerdict::Pass
    );
    // 16 digits failing the Luhn check are not a card.
    assert_eq!(
        pii.check_answer("id 4111 1111 1111 1112", &meta).unwrap(),
        TextVerdict::Pass
    );

    let answer = "Write to jane.doe@example.com, or call +44 20 7946 0958 today.";
    let whole = match pii.check_answer(answer, &meta).unwrap() {
        TextVerdict::Rewrite(text) => text,
        other => panic!("expected a rewrite, got {other:?}"),
    };
    assert_eq!(whole, "Write to [EMAIL], or call [PHONE] today.");
    for size in [1, 2, 3, 5, 8, 13] {
        assert_eq!(
            stream(&pii, answer, size, &meta).as_deref(),
            Ok(whole.as_str()),
            "pieces of {size}"
        );
    }
}

#[test]
fn blocked_terms_refuse_or_mask_as_configured() {
    let host = host();
    let terms = load_guardrail(&host, "blocked-terms");
    let refuse = config(r#"{"terms": ["project zeus"]}"#);
    let mask = config(r#"{"terms": ["project zeus"], "action": "mask"}"#);

    let prompt = [message("user", "Tell me about Project Zeus.")];
    match terms.check_prompt(&prompt, &refuse).unwrap() {
        PromptVerdict::Refuse(reason) => assert!(reason.contains("blocked term"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        terms.check_prompt(&prompt, &mask).unwrap(),
        PromptVerdict::Rewrite(vec!["Tell me about ************.".into()])
    );
    let clean = [message("user", "Tell me about projects.")];
    assert_eq!(
        terms.check_prompt(&clean, &refuse).unwrap(),
        PromptVerdict::Pass
    );

    // A term split across pieces is still found.
    let answer = "The code name is project zeus, as planned.";
    for size in [1, 4, 7] {
        let refused = stream(&terms, answer, size, &refuse).expect_err("refused");
        assert!(refused.contains("blocked term"), "{refused}");
        assert_eq!(
            stream(&terms, answer, size, &mask).as_deref(),
            Ok("The code name is ************, as planned.")
        );
    }

    // Attached without terms: the guardrail's own failure, said as such.
    let err = terms
        .check_answer("text", &config("{}"))
        .expect_err("no terms");
    assert_eq!(err.fault(), PluginFault::Plugin, "{err}");
    assert!(err.to_string().contains("no terms configured"), "{err}");
}

#[test]
fn an_upload_is_told_apart_by_its_world() {
    let host = host();
    assert!(matches!(
        host.load(&plugin_bytes("pii-mask")),
        Ok(Loaded::Guardrail(_))
    ));
    assert!(matches!(
        host.load(&plugin_bytes("passthrough")),
        Ok(Loaded::Pipeline(_))
    ));
    let err = host
        .compile_guardrail(&plugin_bytes("passthrough"))
        .err()
        .expect("a pipeline plugin is no guardrail");
    assert!(matches!(err, PluginError::Invalid { .. }), "{err}");
    let err = host
        .compile(&plugin_bytes("blocked-terms"))
        .err()
        .expect("a guardrail is no pipeline plugin");
    assert!(matches!(err, PluginError::Invalid { .. }), "{err}");
}

#[test]
fn a_hostile_guardrail_fails_only_its_own_call() {
    let host = host();
    let hostile = load_guardrail(&host, "hostile-guardrail");
    let pii = load_guardrail(&host, "pii-mask");
    let meta = config("{}");
    let cases = [
        ("loop", FaultKind::Timeout),
        ("memory", FaultKind::Memory),
        ("trap", FaultKind::Trap),
    ];
    for (attack, expected) in cases {
        let results = [
            hostile
                .check_prompt(&[message("user", attack)], &meta)
                .map(|_| ()),
            hostile.check_answer(attack, &meta).map(|_| ()),
            hostile.check_stream("", attack, false, &meta).map(|_| ()),
        ];
        for result in results {
            match result {
                Err(PluginError::Fault { kind, detail, .. }) => {
                    assert_eq!(kind, expected, "{attack}: {detail}")
                }
                other => panic!("{attack}: expected a {expected} fault, got {other:?}"),
            }
        }
        // The next call gets a fresh instance; other guardrails and plugins are untouched.
        assert_eq!(
            hostile.check_answer("fine", &meta).unwrap(),
            TextVerdict::Pass
        );
        assert!(matches!(
            pii.check_answer("me@example.org", &meta).unwrap(),
            TextVerdict::Rewrite(_)
        ));
    }
    let passthrough = load(&host, "passthrough");
    assert_eq!(passthrough.description().name, "passthrough");
}
