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

/// The `name="value"` pairs of a label set, split at the commas outside quotes.
pub fn label_pairs(labels: &str) -> Vec<&str> {
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

/// Labels whose ranks all report the same batch: a tensor-, pipeline- or expert-parallel
/// group counts once (its rank-0 series, else its largest). Adding across them would multiply
/// the figure by the group's size (8x with EP8 and `--enable-metrics-for-all-schedulers`).
const SAME_BATCH: [&str; 4] = ["tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"];

/// How a metric's series combine across data-parallel ranks (`dp_rank`) and vLLM engines
/// (`engine`), which each serve their own requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Counts, rates and counters add up.
    Sum,
    /// Ratios (KV usage) are averaged.
    Mean,
    /// The largest (the fullest rank's KV cache).
    Max,
}

/// A same-batch group's series: (its rank-0 value, its largest).
type Once = (Option<f64>, f64);

/// A server's figure from a metric's series, by what its labels mean: [`SAME_BATCH`] ranks
/// count once; SGLang's priority scheduling exports a total (`priority=""`) beside its
/// breakdown, and a total is never added to its own breakdown; what is left (data-parallel
/// ranks, engines, other labels) combines by `how`. `None` when the metric is absent.
pub fn combine(text: &str, name: &str, how: Combine) -> Option<f64> {
    use std::collections::BTreeMap;
    // group (the labels that tell servers apart) → priority → its series
    let mut groups: BTreeMap<String, BTreeMap<Option<String>, Once>> = BTreeMap::new();
    for (_, labels, value) in samples(text).filter(|(n, _, _)| *n == name) {
        let mut group = Vec::new();
        let mut priority = None;
        let mut rank0 = true;
        for pair in label_pairs(labels) {
            let (key, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = v.trim_matches('"');
            if SAME_BATCH.contains(&key) {
                rank0 &= v == "0";
            } else if key == "priority" {
                priority = Some(v.to_owned());
            } else {
                group.push(pair);
            }
        }
        let (zero, max) = groups
            .entry(group.join(","))
            .or_default()
            .entry(priority)
            .or_insert((None, f64::NEG_INFINITY));
        if rank0 {
            *zero = Some(value);
        }
        *max = max.max(value);
    }
    let values: Vec<f64> = groups
        .values()
        .map(|by_priority| {
            let once = |(zero, max): &(Option<f64>, f64)| zero.unwrap_or(*max);
            match by_priority.get(&Some(String::new())) {
                Some(total) => once(total),
                None => by_priority.values().map(once).sum(),
            }
        })
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(match how {
        Combine::Sum => values.iter().sum(),
        Combine::Mean => values.iter().sum::<f64>() / values.len() as f64,
        Combine::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
    })
}

/// The first of `names` the exposition has, combined by [`combine`]: metric names moved
/// between releases, and a server exports one of them.
pub fn first_of(text: &str, names: &[&str], how: Combine) -> Option<f64> {
    names.iter().find_map(|n| combine(text, n, how))
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
        assert_eq!(
            combine(text, "sglang:num_running_reqs", Combine::Sum),
            Some(150.0)
        );
        assert_eq!(
            combine(text, "sglang:num_queue_reqs", Combine::Sum),
            Some(37.0)
        );
        assert_eq!(
            combine(text, "vllm:generation_tokens_total", Combine::Sum),
            Some(1.5e6)
        );
        assert_eq!(
            combine(text, "weird_inf", Combine::Sum),
            Some(f64::INFINITY)
        );
        assert_eq!(combine(text, "broken", Combine::Sum), None);
        assert_eq!(combine(text, "absent", Combine::Sum), None);
    }

    #[test]
    fn tensor_parallel_ranks_count_once_and_data_parallel_ranks_add_up() {
        let tp: String = (0..8)
            .map(|r| {
                format!("sglang:num_running_reqs{{model_name=\"kimi\",tp_rank=\"{r}\"}} 150\n")
            })
            .collect();
        assert_eq!(
            combine(&tp, "sglang:num_running_reqs", Combine::Sum),
            Some(150.0)
        );
        let dp = "sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\"} 75\n\
                  sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"1\"} 75\n\
                  sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 75\n\
                  sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"1\"} 75\n";
        assert_eq!(
            combine(dp, "sglang:num_running_reqs", Combine::Sum),
            Some(150.0)
        );
        let engines = "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 40\n\
                       vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 35\n";
        assert_eq!(
            combine(engines, "vllm:num_requests_running", Combine::Sum),
            Some(75.0)
        );
        // Without rank 0 the group's largest series stands for it.
        let no_rank0 = "x{tp_rank=\"1\"} 3\nx{tp_rank=\"2\"} 5\n";
        assert_eq!(combine(no_rank0, "x", Combine::Sum), Some(5.0));
        assert_eq!(
            first_of(
                engines,
                &["absent", "vllm:num_requests_running"],
                Combine::Sum
            ),
            Some(75.0)
        );
    }

    #[test]
    fn expert_ranks_count_once_totals_are_not_added_and_ratios_average() {
        let ep: String = (0..8)
            .map(|r| format!("sglang:num_running_reqs{{moe_ep_rank=\"{r}\",tp_rank=\"{r}\",dp_rank=\"0\"}} 233\n"))
            .collect();
        assert_eq!(
            combine(&ep, "sglang:num_running_reqs", Combine::Sum),
            Some(233.0)
        );
        let priority = "sglang:num_queue_reqs{priority=\"\",tp_rank=\"0\"} 30\n\
                        sglang:num_queue_reqs{priority=\"0\",tp_rank=\"0\"} 10\n\
                        sglang:num_queue_reqs{priority=\"1\",tp_rank=\"0\"} 20\n";
        assert_eq!(
            combine(priority, "sglang:num_queue_reqs", Combine::Sum),
            Some(30.0)
        );
        let breakdown = "q{priority=\"0\"} 10\nq{priority=\"1\"} 20\n";
        assert_eq!(combine(breakdown, "q", Combine::Sum), Some(30.0));
        let kv = "vllm:kv_cache_usage_perc{engine=\"0\"} 0.575\n\
                  vllm:kv_cache_usage_perc{engine=\"1\"} 0.635\n";
        let mean = combine(kv, "vllm:kv_cache_usage_perc", Combine::Mean).unwrap();
        assert!((mean - 0.605).abs() < 1e-12);
        assert_eq!(
            combine(kv, "vllm:kv_cache_usage_perc", Combine::Max),
            Some(0.635)
        );
    }
}
