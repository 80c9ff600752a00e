//! Chat templates: the Jinja template a GGUF file carries (`tokenizer.chat_template`), rendered
//! with minijinja as TGI and vLLM do, in the environment Hugging Face's `apply_chat_template`
//! gives templates: `trim_blocks` and `lstrip_blocks`, `raise_exception`, `strftime_now`,
//! `tojson`, Python string methods (`.strip()`, `.startswith()`...), `bos_token`/`eos_token`
//! and `add_generation_prompt`.

use minijinja::syntax::SyntaxConfig;
use minijinja::value::Serde;
use minijinja::{context, Environment, Error, ErrorKind};
use serde::Serialize;

/// One chat message, as the template sees it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

/// ChatML: used when a GGUF file carries no template (as llama.cpp's server does).
const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
    /// Whether the template reads `tools` (renders the tools it is given).
    supports_tools: bool,
}

fn raise_exception(message: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC time; the formats templates use (`%d %b %Y`,
/// `%Y-%m-%d`) are supported.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let name = MONTHS[(month - 1) as usize];
    format
        .replace("%Y", &year.to_string())
        .replace("%m", &format!("{month:02}"))
        .replace("%d", &format!("{day:02}"))
        .replace("%B", name)
        .replace("%b", &name[..3])
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's algorithm.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

impl ChatTemplate {
    /// Compiles `source` (ChatML when None). A template that does not compile is the model
    /// file's fault: the error says where.
    pub fn new(
        source: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| format!("template syntax: {e}"))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", source.unwrap_or(CHATML).to_string())
            .map_err(|e| format!("the model's chat template does not compile: {e:#}"))?;
        let supports_tools = env
            .get_template("chat")
            .map(|t| t.undeclared_variables(false).contains("tools"))
            .unwrap_or(false);
        Ok(ChatTemplate {
            env,
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            supports_tools,
        })
    }

    /// Whether the template renders the tools it is given (else tools are described in the
    /// generic form, see [`crate::tools::prompt`]).
    pub fn supports_tools(&self) -> bool {
        self.supports_tools
    }

    /// The prompt for `messages`, ending with the assistant's turn opened when
    /// `add_generation_prompt`. A template's `raise_exception` (e.g. roles not alternating) is
    /// the client's fault and comes back as Err with the template's message.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let values = serde_json::to_value(messages).map_err(|e| format!("messages: {e}"))?;
        self.render_values(&values, None, add_generation_prompt)
    }

    /// [`render`](Self::render) of messages in any form the template reads (tool calls,
    /// tool results), with `tools` when given.
    pub fn render_values(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String, String> {
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| format!("chat template: {e}"))?;
        template
            .render(context! {
                messages => Serde(messages),
                add_generation_prompt => add_generation_prompt,
                bos_token => self.bos_token.as_str(),
                eos_token => self.eos_token.as_str(),
                tools => tools.map(Serde),
            })
            .map_err(|e| match e.kind() {
                ErrorKind::InvalidOperation => e.detail().unwrap_or("invalid messages").to_string(),
                _ => format!("rendering the chat template: {e:#}"),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: &str) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }

    /// SmolLM2-Instruct's template, as its GGUF file carries it.
    const SMOLLM2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

    #[test]
    fn renders_the_models_template_with_its_default_system_prompt() {
        let t = ChatTemplate::new(Some(SMOLLM2), "<|im_start|>", "<|im_end|>").unwrap();
        let out = t.render(&[msg("user", "Hi")], true).unwrap();
        assert_eq!(
            out,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let with_system = t
            .render(&[msg("system", "Be brief."), msg("user", "Hi")], false)
            .unwrap();
        assert!(with_system.starts_with("<|im_start|>system\nBe brief.<|im_end|>"));
        assert!(!with_system.ends_with("assistant\n"));
    }

    #[test]
    fn hugging_face_idioms_work() {
        // raise_exception, .strip(), bos_token, whitespace control as transformers sets it.
        let source = "{{ bos_token }}{% for m in messages %}\n  {% if m.role not in ['user', 'assistant'] %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}\n  [{{ m.role }}] {{ m.content.strip() }}\n{% endfor %}";
        let t = ChatTemplate::new(Some(source), "<s>", "</s>").unwrap();
        assert_eq!(
            t.render(&[msg("user", "  hello ")], true).unwrap(),
            "<s>  [user] hello\n"
        );
        assert_eq!(
            t.render(&[msg("system", "x")], true).unwrap_err(),
            "Only user and assistant roles are supported!"
        );
        assert!(ChatTemplate::new(Some("{% for %}"), "", "")
            .unwrap_err()
            .contains("does not compile"));
    }

    #[test]
    fn chatml_without_a_template_and_dates() {
        let t = ChatTemplate::new(None, "", "").unwrap();
        assert_eq!(
            t.render(&[msg("user", "Hi")], true).unwrap(),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(20_000), (2024, 10, 4));
        assert_eq!(strftime_now("%Y".into()).len(), 4);
    }
}
