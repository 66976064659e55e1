//! Just enough of the Prometheus text format to read an inference server's own metrics: the
//! samples, by name. Exact about what it reads (quoted label values may hold `}` and spaces),
//! and it skips what it does not need (comments, timestamps).

/// The samples of an exposition as (metric name, value); lines that are not samples are skipped.
pub fn samples(text: &str) -> impl Iterator<Item = (&str, f64)> {
    text.lines().filter_map(sample)
}

fn sample(line: &str) -> Option<(&str, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    if rest.starts_with('{') {
        rest = &rest[labels_end(rest)?..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, value))
}

/// The index just past the `}` that closes the label set at the start of `s`.
fn labels_end(s: &str) -> Option<usize> {
    let mut in_quotes = false;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            '}' if !in_quotes => return Some(i + 1),
            _ => {}
        }
    }
    None
}

/// The sum of a metric's samples over all its label sets (per-rank or per-model series add up
/// to the server's figure); `None` when it is absent.
pub fn sum(text: &str, name: &str) -> Option<f64> {
    samples(text)
        .filter(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .reduce(|a, b| a + b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_samples_and_skips_the_rest() {
        let text = r#"
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="kimi",tp_rank="0"} 148.0
sglang:num_running_reqs{model_name="odd } name, with \"quotes\"",tp_rank="1"} 2
sglang:num_queue_reqs{model_name="kimi"} 37 1712345678000
vllm:generation_tokens_total 1.5e6
weird_inf +Inf
broken{unclosed="x 5
"#;
        assert_eq!(sum(text, "sglang:num_running_reqs"), Some(150.0));
        assert_eq!(sum(text, "sglang:num_queue_reqs"), Some(37.0));
        assert_eq!(sum(text, "vllm:generation_tokens_total"), Some(1.5e6));
        assert_eq!(sum(text, "weird_inf"), Some(f64::INFINITY));
        assert_eq!(sum(text, "broken"), None);
        assert_eq!(sum(text, "absent"), None);
    }
}
