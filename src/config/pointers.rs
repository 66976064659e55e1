//! `[outputs.pointers]`: where the output source finds each fact in a record.

use serde::{Deserialize, Serialize};

/// Where to find each fact in a record. Each list is tried in order; the first pointer that
/// resolves wins (for `text`, every pointer that resolves is a text field).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Pointers {
    pub tokens: Vec<String>,
    pub finish_reason: Vec<String>,
    pub text: Vec<String>,
    pub error: Vec<String>,
}

impl Default for Pointers {
    fn default() -> Pointers {
        let own = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        Pointers {
            // SGLang /generate, then OpenAI-style, then flat.
            tokens: own(&[
                "/meta_info/completion_tokens",
                "/usage/completion_tokens",
                "/completion_tokens",
            ]),
            finish_reason: own(&[
                "/meta_info/finish_reason/type",
                "/meta_info/finish_reason",
                "/choices/0/finish_reason",
                "/finish_reason",
            ]),
            text: own(&[
                "/text",
                "/choices/0/message/content",
                "/choices/0/message/reasoning_content",
                "/choices/0/text",
                "/response",
                "/output",
            ]),
            error: own(&["/error", "/meta_info/error"]),
        }
    }
}
