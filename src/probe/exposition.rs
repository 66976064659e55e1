//! Just enough of the Prometheus text format to read an inference server's own metrics: the
//! samples, by name. Exact about what it reads (quoted label values may hold `}` and spaces),
//! and it skips what it does not need (comments, timestamps).

/// The samples of an exposition as (metric name, label set as written, value); lines that are
/// not samples are skipped.
pub fn samples(text: &str) -> impl Iterator<Item = (&str, &str, f64)> {
    text.lines().filter_map(sample)
}

fn sample(line: &str) -> Option<(&str, &str, f64)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(|c: char| c == '{' || c.is_whitespace())?;
    let name = &line[..name_end];
    let mut rest = &line[name_end..];
    let mut labels = "";
    if rest.starts_with('{') {
        let end = labels_end(rest)?;
        labels = &rest[1..end - 1];
        rest = &rest[end..];
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some((name, labels, value))
}

/// `tp_rank="3"` and the label set without it, from a label set as written.
fn split_tp_rank(labels: &str) -> (Option<&str>, String) {
    let mut rank = None;
    let mut rest = Vec::new();
    for pair in label_pairs(labels) {
        match pair.split_once('=') {
            Some(("tp_rank", value)) => rank = Some(value.trim_matches('"')),
            _ => rest.push(pair),
        }
    }
    (rank, rest.join(","))
}

/// The `name="value"` pairs of a label set, split at the commas outside quotes.
fn label_pairs(labels: &str) -> Vec<&str> {
    let mut pairs = Vec::new();
    let (mut start, mut in_quotes, mut escaped) = (0, false, false);
    for (i, c) in labels.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_quotes => escaped = true,
            '"' => in_quotes = !in_quotes,
            ',' if !in_quotes => {
                pairs.push(labels[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    pairs.push(labels[start..].trim());
    pairs.retain(|p| !p.is_empty());
    pairs
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

/// A server's figure from a metric's series, by what its rank labels mean: data-parallel
/// ranks (`dp_rank`) and vLLM engines (`engine`) each serve their own requests, so they add
/// up; tensor-parallel ranks (`tp_rank`) all report the same batch, so each tensor-parallel
/// group counts once (its `tp_rank="0"` series, else its largest). Adding across `tp_rank`
/// would multiply the figure by the TP size. `None` when the metric is absent.
pub fn combine(text: &str, name: &str) -> Option<f64> {
    let mut groups: std::collections::BTreeMap<String, (Option<f64>, f64)> = Default::default();
    let mut any = false;
    for (_, labels, value) in samples(text).filter(|(n, _, _)| *n == name) {
        any = true;
        let (rank, rest) = split_tp_rank(labels);
        let (rank0, max) = groups.entry(rest).or_insert((None, f64::NEG_INFINITY));
        if rank == Some("0") {
            *rank0 = Some(value);
        }
        *max = max.max(value);
    }
    any.then(|| {
        groups
            .values()
            .map(|(rank0, max)| rank0.unwrap_or(*max))
            .sum()
    })
}

/// The first of `names` the exposition has, combined by [`combine`]: metric names moved
/// between releases, and a server exports one of them.
pub fn first_of(text: &str, names: &[&str]) -> Option<f64> {
    names.iter().find_map(|n| combine(text, n))
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
        assert_eq!(combine(text, "sglang:num_running_reqs"), Some(150.0));
        assert_eq!(combine(text, "sglang:num_queue_reqs"), Some(37.0));
        assert_eq!(combine(text, "vllm:generation_tokens_total"), Some(1.5e6));
        assert_eq!(combine(text, "weird_inf"), Some(f64::INFINITY));
        assert_eq!(combine(text, "broken"), None);
        assert_eq!(combine(text, "absent"), None);
    }

    #[test]
    fn tensor_parallel_ranks_count_once_and_data_parallel_ranks_add_up() {
        let tp: String = (0..8)
            .map(|r| {
                format!("sglang:num_running_reqs{{model_name=\"kimi\",tp_rank=\"{r}\"}} 150\n")
            })
            .collect();
        assert_eq!(combine(&tp, "sglang:num_running_reqs"), Some(150.0));
        let dp = "sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\"} 75\n\
                  sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"1\"} 75\n\
                  sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 75\n\
                  sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"1\"} 75\n";
        assert_eq!(combine(dp, "sglang:num_running_reqs"), Some(150.0));
        let engines = "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 40\n\
                       vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 35\n";
        assert_eq!(combine(engines, "vllm:num_requests_running"), Some(75.0));
        // Without rank 0 the group's largest series stands for it.
        let no_rank0 = "x{tp_rank=\"1\"} 3\nx{tp_rank=\"2\"} 5\n";
        assert_eq!(combine(no_rank0, "x"), Some(5.0));
        assert_eq!(
            first_of(engines, &["absent", "vllm:num_requests_running"]),
            Some(75.0)
        );
    }
}
