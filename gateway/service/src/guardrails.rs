//! Chat guardrails on chat models: uploaded plugins of the guardrail world (`plugins/wit/
//! guardrail.wit`), attached server-wide (`[guardrails] chat`), per API key (the key's
//! `guardrails`) and per model (its settings' `guardrails` field), that read a request's
//! messages before the model and its answer after, and let the text pass, rewrite it or refuse
//! it. They run in that order: the server's, the caller's key's, the model's.
//!
//! The transport resolves the attachments of the caller and the model a request runs
//! ([`resolve`]), checks
//! the messages before the chat template renders them ([`Guards::check_prompt`]), and puts one
//! [`ChatHook`] per guardrail in front of the request's other hooks ([`Guards::hooks`]), so
//! that a cache or anything else that follows the answer sees only what the guardrails let
//! through. A whole answer is checked once, complete; a streamed one piece by piece, each
//! guardrail holding back at most its look-behind of text that may still become a match.
//!
//! A refusal is the client's answer: a 400 with the code `content_filter` (a stream ends with
//! that finish reason instead). A guardrail that fails (a trap, its deadline, its memory cap)
//! fails the request as a plugin fault; a guardrail that cannot be found fails it with 503:
//! text never passes unchecked.

use crate::error::{ApiError, ApiResult};
use crate::metrics::guardrails::{GuardrailMetrics, GuardrailSeries, PhaseSeries, Verdict};
use crate::metrics::TraceExemplar;
use crate::model_settings::ModelSettings;
use crate::phases::ChatHook;
use crate::pipelines::registry::PluginRegistry;
use crate::pipelines::spec::PluginRef;
use infergate_plugin_host::{
    ChatText, Guardrail, Metadata, PluginError, PromptVerdict, TextVerdict,
};
use infergate_store::keys::KeyRecord;
use std::sync::Arc;
use std::time::Instant;

pub use crate::guardrail_attachment::Attachment;

/// The `code` of a guardrail's refusal (OpenAI's, for content its filters refused).
pub const REFUSED: &str = "content_filter";

/// One attached guardrail, resolved to what runs now.
#[derive(Clone)]
struct Attached {
    guardrail: Guardrail,
    /// `name@version`, as refusals and errors name it.
    label: String,
    metadata: Arc<Metadata>,
    series: Arc<GuardrailSeries>,
    /// The request's trace while it is recorded, looked up in the request's task: the calls
    /// run on blocking threads, and an answer's where the answer is sent from.
    exemplar: Option<TraceExemplar>,
}

/// Where a request's guardrails come from: the server's, the caller's key's, the model's.
pub struct Sources<'a> {
    pub plugins: &'a PluginRegistry,
    pub server: &'a crate::config::GuardrailsConfig,
    pub settings: &'a ModelSettings,
    pub metrics: &'a GuardrailMetrics,
}

/// The guardrails a request runs, in order: the server's, the key's, then the model's.
#[derive(Clone)]
pub struct Guards {
    attached: Vec<Attached>,
    look_behind: usize,
}

/// The guardrails of `key`'s (None: an anonymous caller's) chat requests to `model`: the
/// server's (`[guardrails] chat`), then the key's own, then the model's own; None when there
/// are none. An attachment that does not resolve to an uploaded guardrail, or a stored list
/// that does not parse, is the operator's to fix: 503, never a request let through unchecked.
pub fn resolve(
    sources: &Sources<'_>,
    key: Option<&KeyRecord>,
    model: &str,
) -> ApiResult<Option<Guards>> {
    let Sources {
        plugins,
        server,
        settings,
        metrics,
    } = *sources;
    let key_list = match key.and_then(|k| k.guardrails.as_deref().map(|text| (k, text))) {
        None => Vec::new(),
        Some((k, text)) => key_attachments(text).map_err(|e| {
            ApiError::unavailable(format!(
                "API key {} has guardrails that do not parse ({e}); set them again",
                k.id
            ))
        })?,
    };
    let own = settings.get(model);
    if let Some(e) = own.as_ref().and_then(|s| s.guardrails_error.as_ref()) {
        return Err(ApiError::unavailable(format!(
            "model '{model}' has guardrails that do not parse ({e}); set them again"
        )));
    }
    let model_list = own.as_ref().map_or(&[][..], |s| s.guardrails.as_slice());
    if server.chat.is_empty() && key_list.is_empty() && model_list.is_empty() {
        return Ok(None);
    }
    let exemplar = crate::metrics::current_exemplar();
    let attached = server
        .chat
        .iter()
        .map(|a| (a, "[guardrails] chat"))
        .chain(key_list.iter().map(|a| (a, "the API key's guardrails")))
        .chain(model_list.iter().map(|a| (a, "the model's settings")))
        .map(|(a, whose)| {
            attach(plugins, metrics, a, model, whose).map(|attached| Attached {
                exemplar: exemplar.clone(),
                ..attached
            })
        })
        .collect::<ApiResult<Vec<_>>>()?;
    Ok(Some(Guards {
        attached,
        look_behind: server.look_behind_bytes.max(1),
    }))
}

/// A key's stored list (JSON text), checked as an API body is.
fn key_attachments(text: &str) -> Result<Vec<Attachment>, String> {
    let value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Attachment::list(value)
}

fn attach(
    plugins: &PluginRegistry,
    metrics: &GuardrailMetrics,
    a: &Attachment,
    model: &str,
    whose: &str,
) -> ApiResult<Attached> {
    let unavailable = |why: String| {
        ApiError::unavailable(format!(
            "guardrail {} attached in {whose} cannot run ({why}); chat requests fail until it is uploaded or detached",
            a.plugin
        ))
    };
    let r = PluginRef::parse(&a.plugin).map_err(|e| unavailable(e.0))?;
    let loaded = plugins.resolve(&r).map_err(|e| unavailable(e.message))?;
    let guardrail = loaded
        .guardrail()
        .ok_or_else(|| unavailable("it is a pipeline plugin, not a chat guardrail".into()))?
        .clone();
    let config = if a.config.is_null() {
        "{}".to_owned()
    } else {
        a.config.to_string()
    };
    let label = format!("{}@{}", loaded.record.name, loaded.record.version);
    Ok(Attached {
        series: metrics.series(&label),
        exemplar: None,
        label,
        guardrail,
        metadata: Arc::new(vec![
            ("model".to_owned(), model.to_owned()),
            ("config".to_owned(), config),
        ]),
    })
}

/// Runs one guardrail call and records it in `series` (its verdict, from `verdict`), with the
/// request's trace as the duration's exemplar.
fn observed<T>(
    series: &PhaseSeries,
    exemplar: &Option<TraceExemplar>,
    call: impl FnOnce() -> Result<T, PluginError>,
    verdict: impl FnOnce(&T) -> Verdict,
) -> Result<T, PluginError> {
    let started = Instant::now();
    let result = call();
    series.record(
        started.elapsed(),
        exemplar.clone(),
        result.as_ref().map(verdict),
    );
    result
}

fn prompt_verdict(v: &PromptVerdict) -> Verdict {
    match v {
        PromptVerdict::Pass => Verdict::Pass,
        PromptVerdict::Rewrite(_) => Verdict::Rewrite,
        PromptVerdict::Refuse(_) => Verdict::Refuse,
    }
}

fn text_verdict(v: &TextVerdict) -> Verdict {
    match v {
        TextVerdict::Pass => Verdict::Pass,
        TextVerdict::Rewrite(_) => Verdict::Rewrite,
        TextVerdict::Refuse(_) => Verdict::Refuse,
    }
}

fn refusal(label: &str, reason: &str) -> ApiError {
    ApiError::bad_request(format!("refused by guardrail {label}: {reason}")).with_code(REFUSED)
}

/// Runs a guardrail call off the async threads where it can: calls are CPU-bound and bounded
/// by the guardrail's deadline, and a runtime with one thread has no other to move work to.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl Guards {
    /// The request's messages (role and text) through every guardrail in order, each seeing
    /// the previous one's rewrite: the contents the model gets when any changed, or the
    /// refusal (400, code `content_filter`).
    pub async fn check_prompt(&self, messages: Vec<ChatText>) -> ApiResult<Option<Vec<String>>> {
        let attached = self.attached.clone();
        tokio::task::spawn_blocking(move || {
            let mut messages = messages;
            let mut changed = false;
            for a in &attached {
                let verdict = observed(
                    &a.series.prompt,
                    &a.exemplar,
                    || a.guardrail.check_prompt(&messages, &a.metadata),
                    prompt_verdict,
                )?;
                match verdict {
                    PromptVerdict::Pass => {}
                    PromptVerdict::Rewrite(contents) => {
                        for (m, content) in messages.iter_mut().zip(contents) {
                            if m.content != content {
                                m.content = content;
                                changed = true;
                            }
                        }
                    }
                    PromptVerdict::Refuse(reason) => return Err(refusal(&a.label, &reason)),
                }
            }
            Ok(changed.then(|| messages.into_iter().map(|m| m.content).collect()))
        })
        .await
        .map_err(|e| ApiError::internal(format!("guardrail task failed: {e}")))?
    }

    /// What a response cache must key on besides the prompt: which guardrails (and versions,
    /// and configurations) shaped the answer.
    pub fn signature(&self) -> String {
        self.attached
            .iter()
            .map(|a| format!("{} {:?}", a.label, a.metadata))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// One hook per guardrail, in order, for a whole answer (`stream` false: checked once,
    /// complete) or a streamed one.
    pub fn hooks(&self, stream: bool) -> Vec<Box<dyn ChatHook>> {
        self.attached
            .iter()
            .map(|a| {
                Box::new(AnswerGuard {
                    attached: a.clone(),
                    stream,
                    look_behind: self.look_behind,
                    choices: Vec::new(),
                }) as Box<dyn ChatHook>
            })
            .collect()
    }
}

/// One choice's text as one guardrail follows it.
#[derive(Default)]
struct ChoiceText {
    /// Text not sent yet: held back by the guardrail, or (for a whole answer) all of it.
    pending: String,
    /// The end of what was sent, at most the look-behind, for the guardrail's context.
    released: String,
}

/// One guardrail on one request's answer.
struct AnswerGuard {
    attached: Attached,
    stream: bool,
    look_behind: usize,
    choices: Vec<ChoiceText>,
}

impl AnswerGuard {
    /// The pending text of `choice` with `text` added, through the guardrail: what goes out
    /// now. `last`: the choice's text is complete, nothing may stay pending.
    fn feed(&mut self, choice: usize, text: &str, last: bool) -> ApiResult<String> {
        let AnswerGuard {
            attached,
            stream,
            look_behind,
            choices,
        } = self;
        let look_behind = *look_behind;
        if choices.len() <= choice {
            choices.resize_with(choice + 1, ChoiceText::default);
        }
        let state = &mut choices[choice];
        state.pending.push_str(text);
        if !*stream {
            if !last {
                return Ok(String::new());
            }
            let pending = std::mem::take(&mut state.pending);
            let verdict = blocking(|| {
                observed(
                    &attached.series.answer,
                    &attached.exemplar,
                    || {
                        attached
                            .guardrail
                            .check_answer(&pending, &attached.metadata)
                    },
                    text_verdict,
                )
            })?;
            return match verdict {
                TextVerdict::Pass => Ok(pending),
                TextVerdict::Rewrite(text) => Ok(text),
                TextVerdict::Refuse(reason) => Err(refusal(&attached.label, &reason)),
            };
        }
        if state.pending.is_empty() {
            return Ok(String::new());
        }
        // At the bound the guardrail must decide on everything: nothing goes out unchecked.
        let decide_all = last || state.pending.len() >= look_behind;
        let verdict = blocking(|| {
            observed(
                &attached.series.answer,
                &attached.exemplar,
                || {
                    attached.guardrail.check_stream(
                        &state.released,
                        &state.pending,
                        decide_all,
                        &attached.metadata,
                    )
                },
                |v| text_verdict(&v.verdict),
            )
        })?;
        let ready = state.pending.len() - verdict.hold as usize;
        let out = match verdict.verdict {
            TextVerdict::Pass => state.pending[..ready].to_owned(),
            TextVerdict::Rewrite(text) => text,
            TextVerdict::Refuse(reason) => return Err(refusal(&attached.label, &reason)),
        };
        state.pending.drain(..ready);
        state.released.push_str(&out);
        if state.released.len() > look_behind {
            let mut cut = state.released.len() - look_behind;
            while !state.released.is_char_boundary(cut) {
                cut += 1;
            }
            state.released.drain(..cut);
        }
        Ok(out)
    }
}

impl ChatHook for AnswerGuard {
    fn on_text(&mut self, choice: usize, text: String) -> ApiResult<String> {
        self.feed(choice, &text, false)
    }

    fn end_of_text(&mut self, choice: usize) -> ApiResult<String> {
        self.feed(choice, "", true)
    }
}
