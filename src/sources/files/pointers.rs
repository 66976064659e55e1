//! `[outputs.pointers]`: where the output source finds each fact in a record.
//!
//! The defaults read, with no configuration, the records of SGLang's `/generate`, OpenAI-style
//! chat completions, flat records, the OpenAI Batch API's output file (which vLLM's
//! `run_batch` also writes) and Anthropic's Message Batches results (docs/formats.md).

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
    /// An HTTP status code: a record whose status is not 2xx is an error.
    pub status: Vec<String>,
    /// A batch result's type: anything but `succeeded` is an error.
    pub result_type: Vec<String>,
    /// The prompt's id, which a re-run writes again: records with the same id are one.
    pub id: Vec<String>,
    /// Without an id, the prompt itself (hashed as written) is the record's identity.
    pub prompt: Vec<String>,
}

impl Default for Pointers {
    fn default() -> Pointers {
        let own = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect();
        Pointers {
            // SGLang /generate, OpenAI-style, flat, then the OpenAI batch and Anthropic batch
            // result shapes.
            tokens: own(&[
                "/meta_info/completion_tokens",
                "/usage/completion_tokens",
                "/completion_tokens",
                "/response/body/usage/completion_tokens",
                "/result/message/usage/output_tokens",
                // datatrove's InferenceRunner (its first rollout), Curator's raw response.
                "/metadata/rollout_results/0/usage/completion_tokens",
                "/raw_response/usage/completion_tokens",
            ]),
            finish_reason: own(&[
                "/meta_info/finish_reason/type",
                "/meta_info/finish_reason",
                "/choices/0/finish_reason",
                "/finish_reason",
                "/response/body/choices/0/finish_reason",
                "/result/message/stop_reason",
                "/metadata/rollout_results/0/finish_reason",
                "/raw_response/choices/0/finish_reason",
            ]),
            text: own(&[
                "/text",
                "/choices/0/message/content",
                "/choices/0/message/reasoning_content",
                "/choices/0/message/reasoning",
                "/choices/0/text",
                "/response",
                "/output",
                "/response/body/choices/0/message/content",
                "/response/body/choices/0/message/reasoning_content",
                "/response/body/choices/0/message/reasoning",
                "/response/body/choices/0/text",
                "/result/message/content",
                "/result/message/content/0/text",
                "/result/message/content/0/thinking",
                "/result/message/content/1/text",
                "/result/message/content/1/thinking",
                "/response_message",
            ]),
            error: own(&[
                "/error",
                "/meta_info/error",
                "/result/error",
                "/response_errors",
            ]),
            status: own(&["/response/status_code"]),
            result_type: own(&["/result/type"]),
            id: own(&["/custom_id", "/id", "/prompt_id", "/request_id", "/idx"]),
            prompt: own(&["/prompt", "/messages", "/input"]),
        }
    }
}

impl Pointers {
    /// Every list with its key, for validation.
    pub fn lists(&self) -> [(&'static str, &Vec<String>); 8] {
        [
            ("tokens", &self.tokens),
            ("finish_reason", &self.finish_reason),
            ("text", &self.text),
            ("error", &self.error),
            ("status", &self.status),
            ("result_type", &self.result_type),
            ("id", &self.id),
            ("prompt", &self.prompt),
        ]
    }
}
