//! What a generation sends back: text with log probabilities, then how it ended and its token
//! counts.

/// Why a generation ended (OpenAI's `finish_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its answer or a stop sequence appeared.
    Stop,
    /// `max_tokens` reached.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// An alternative token and its log probability.
#[derive(Debug, Clone, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// The log probability of a generated token (from the model's distribution, before sampling
/// parameters reshape it, as vLLM reports them) and the most likely alternatives.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub bytes: Vec<u8>,
    pub logprob: f32,
    pub top: Vec<TopLogprob>,
}

/// The end of a generation, with its token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    pub finish: Finish,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: u32,
    /// Drafted tokens (speculative decoding: from the prediction or n-grams) that the model
    /// produced, and those it did not (OpenAI's `completion_tokens_details`).
    pub accepted_prediction_tokens: u32,
    pub rejected_prediction_tokens: u32,
}

/// What a generation sends, in order: text (one event per generated token that released text
/// or carries a log probability), then `Done` or `Error`.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Text {
        text: String,
        logprob: Option<TokenLogprob>,
    },
    Done(Done),
    Error(String),
}
