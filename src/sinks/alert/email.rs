//! The email: what is wrong, why we think so, and the evidence an engineer would have gathered
//! over ssh (progress, the log's tail, output counts, GPUs, process and server), as text and
//! HTML. Pure: notifications and a model snapshot in, subject and bodies out.

use super::lifecycle::{Kind, Notification};
use crate::human::human;
use crate::model::Seconds;
use crate::sinks::status::{StacksStatus, Status};
use std::fmt::Write;

/// Where the email comes from and where its links point.
#[derive(Debug, Clone, Default)]
pub struct Context {
    pub host: String,
    pub dashboard_url: Option<String>,
    pub status_url: Option<String>,
    /// The run this node belongs to: every alert and notification names it.
    pub run: Option<crate::run_identity::RunLabel>,
}

impl Context {
    /// Where an alert is, as a subject line says it: the host, and the run it belongs to.
    pub fn place(&self) -> String {
        match &self.run {
            Some(label) => format!("{} (run {})", self.host, label.run),
            None => self.host.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Email {
    pub subject: String,
    pub text: String,
    pub html: String,
    /// A PNG the HTML shows inline (`cid:`), if one could be drawn.
    pub chart: Option<Vec<u8>>,
    /// The stacks' full dumps, attached as `stacks.txt` (docs/alerts.md#stacks).
    pub stacks: Option<String>,
}

/// The attachment's name.
pub const STACKS_FILE: &str = "stacks.txt";

/// The `Content-ID` the HTML part refers to the chart by.
pub const CHART_ID: &str = "chart@pipeline-pulse";

impl Email {
    /// Puts the chart in the HTML, before the figures; `caption` says what it shows.
    pub fn with_chart(mut self, png: Vec<u8>, caption: &str) -> Email {
        let figure = format!(
            "<h3>{}</h3><img src=\"cid:{CHART_ID}\" width=\"{}\" height=\"{}\" alt=\"{}\">",
            esc(caption),
            super::chart::WIDTH,
            super::chart::HEIGHT,
            esc(caption)
        );
        self.html = match self.html.find("<h3>Progress</h3>") {
            Some(at) => format!("{}{figure}{}", &self.html[..at], &self.html[at..]),
            None => self.html + &figure,
        };
        self.chart = Some(png);
        self
    }

    /// Puts a one-line sparkline of tok/s in the text part, before the figures.
    pub fn with_sparkline(mut self, line: &str) -> Email {
        self.text = match self.text.find("Progress\n") {
            Some(at) => format!("{}{line}\n\n{}", &self.text[..at], &self.text[at..]),
            None => self.text + line + "\n",
        };
        self
    }
}

/// One email for everything one evaluation has to say.
pub fn render(
    notifications: &[Notification],
    status: &Status,
    ctx: &Context,
    now: Seconds,
) -> Email {
    Email {
        subject: subject(notifications, &ctx.place()),
        text: text(notifications, status, ctx, now),
        html: html(notifications, status, ctx, now),
        chart: None,
        stacks: None,
    }
}

/// The stacks an email shows: those taken during a stall it is about (a firing or repeated
/// Stalled, ServerHung or LogSilent), not older ones.
pub fn stacks_shown<'a>(
    notifications: &[Notification],
    status: &'a Status,
) -> Option<&'a StacksStatus> {
    let stacks = status.stacks.as_ref()?;
    notifications
        .iter()
        .any(|n| {
            matches!(n.kind, Kind::Firing | Kind::Reminder)
                && n.condition.alert.wants_stacks()
                && stacks.at >= n.since
        })
        .then_some(stacks)
}

fn stacks_heading(stacks: &StacksStatus) -> String {
    format!(
        "Where it waits (stacks at {}; the full dumps are attached as {STACKS_FILE})",
        when(stacks.at)
    )
}

fn headline(n: &Notification) -> String {
    let c = &n.condition;
    let what = match &c.partition {
        Some(p) => format!("{}: {p}", c.alert),
        None => c.alert.to_string(),
    };
    match n.kind {
        Kind::Resolved { lasted } => format!("{} {what}, lasted {}", n.kind.word(), human(lasted)),
        _ => format!("{} {what}, {}", n.kind.word(), c.summary),
    }
}

/// The subject line, which is also what the log says of an evaluation's notifications.
pub fn subject(notifications: &[Notification], host: &str) -> String {
    match notifications {
        [one] => {
            let c = &one.condition;
            let what = match &c.partition {
                Some(p) => format!("{}: {p}", c.alert),
                None => c.alert.to_string(),
            };
            let tail = match one.kind {
                Kind::Resolved { lasted } => format!("lasted {}", human(lasted)),
                _ => c.summary.clone(),
            };
            format!("[pulse] {} {what} on {host}, {tail}", one.kind.word())
        }
        many => {
            let parts: Vec<String> = many
                .iter()
                .map(|n| match &n.condition.partition {
                    Some(p) => format!("{} {} ({p})", n.kind.word(), n.condition.alert),
                    None => format!("{} {}", n.kind.word(), n.condition.alert),
                })
                .collect();
            format!(
                "[pulse] {} alerts on {host}: {}",
                many.len(),
                parts.join(", ")
            )
        }
    }
}

fn when(t: Seconds) -> String {
    crate::human::utc(t)
}

/// The evidence as rows of cells, shared by the text and HTML bodies.
struct Tables {
    progress: Vec<Vec<String>>,
    outputs: Vec<Vec<String>>,
    gpus: Vec<Vec<String>>,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

/// The evidence tables from the status document, so an email shows the figures that
/// `/status` and `pipeline-pulse status` show.
fn tables(status: &Status, now: Seconds) -> Tables {
    let header = |cells: &[&str]| cells.iter().map(|c| (*c).to_owned()).collect::<Vec<_>>();
    let mut progress = vec![header(&[
        "partition",
        "completed",
        "planned",
        "errors",
        "req/s",
        "tok/s",
        "ETA",
        "stalled for",
        "active",
    ])];
    let mut outputs = vec![header(&[
        "partition",
        "records",
        "log − records",
        "errors",
        "empty",
        "invalid",
        "tokens",
        "last write",
    ])];
    for p in &status.partitions {
        progress.push(vec![
            p.name.clone(),
            opt(p.completed),
            opt(p.planned),
            opt(p.errors),
            opt(p.requests_per_second.map(|r| format!("{r:.1}"))),
            opt(p.tokens_per_second.map(|r| format!("{r:.0}"))),
            opt(p.eta_seconds.map(human)),
            opt(p.stall_seconds.map(human)),
            if p.active { "yes".into() } else { "no".into() },
        ]);
        if let Some(o) = &p.outputs {
            outputs.push(vec![
                p.name.clone(),
                o.records.to_string(),
                opt(p.log_output_gap),
                o.errors.to_string(),
                o.empty.to_string(),
                o.invalid.to_string(),
                o.tokens.to_string(),
                opt(o.last_write.map(|w| format!("{} ago", human(now - w)))),
            ]);
        }
    }
    let mut gpus = vec![header(&[
        "gpu",
        "name",
        "util",
        "memory used",
        "temp",
        "power",
    ])];
    for g in status.gpus.iter().flatten() {
        gpus.push(vec![
            g.index.to_string(),
            g.name.clone(),
            opt(g.utilization.map(|u| format!("{:.0}%", u * 100.0))),
            match (g.memory_used_bytes, g.memory_total_bytes) {
                (Some(u), Some(t)) => format!(
                    "{:.1}/{:.1} GiB",
                    u as f64 / 1073741824.0,
                    t as f64 / 1073741824.0
                ),
                _ => "-".into(),
            },
            opt(g.temperature_celsius.map(|t| format!("{t:.0}°C"))),
            opt(g.power_watts.map(|p| format!("{p:.0} W"))),
        ]);
    }
    Tables {
        progress,
        outputs,
        gpus,
    }
}

fn node_lines(status: &Status) -> Vec<String> {
    let mut lines = Vec::new();
    match &status.process {
        Some(p) if p.up => lines.push(format!("Driver process: running (pid {})", opt(p.pid))),
        Some(_) => lines.push("Driver process: NOT RUNNING".into()),
        None => lines.push("Driver process: not probed (set --process-match)".into()),
    }
    match &status.server {
        Some(s) => {
            let health = match s.up {
                Some(true) => "up",
                Some(false) => "DOWN",
                None => "health not probed",
            };
            let mut line = format!(
                "Inference server: {health}; running {}, queued {}, {} tok/s, KV cache {}, last report {}",
                opt(s.running_requests.map(|v| format!("{v:.0}"))),
                opt(s.queued_requests.map(|v| format!("{v:.0}"))),
                opt(s.generation_tokens_per_second.map(|v| format!("{v:.0}"))),
                opt(s.kv_cache_usage.map(|v| format!("{:.0}%", v * 100.0))),
                opt(s.last_report.map(|at| format!("{} ago", human(status.generated_at - at))))
            );
            if let Some(e) = &s.error {
                line += &format!(" ({e})");
            }
            lines.push(line);
        }
        None => lines.push("Inference server: not probed (set --server-metrics-url)".into()),
    }
    if status.gpus.is_none() {
        lines.push("GPUs: not read".into());
    }
    if let Some(memory) = &status.gpu_memory {
        lines.push(format!("GPU memory: {memory}"));
    }
    lines
}

fn text_table(rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        out += cells.join("  ").trim_end();
        out.push('\n');
    }
    out
}

fn text(notifications: &[Notification], status: &Status, ctx: &Context, now: Seconds) -> String {
    let mut s = String::new();
    for n in notifications {
        let _ = writeln!(s, "{}", headline(n));
        let _ = writeln!(s, "  since {}", when(n.since));
        for line in n.condition.details.lines() {
            let _ = writeln!(s, "  {line}");
        }
        s.push('\n');
    }
    if let Some(stacks) = stacks_shown(notifications, status) {
        let _ = writeln!(s, "{}", stacks_heading(stacks));
        for p in &stacks.processes {
            let _ = writeln!(s, "  {}", p.summary);
        }
        s.push('\n');
    }
    let t = tables(status, now);
    let _ = writeln!(s, "Progress\n{}", text_table(&t.progress));
    if !status.run.outlook.is_empty() {
        let _ = writeln!(s, "Run: {}\n", status.run.outlook);
    }
    if t.outputs.len() > 1 {
        let _ = writeln!(s, "Output files\n{}", text_table(&t.outputs));
    }
    if t.gpus.len() > 1 {
        let _ = writeln!(s, "GPUs\n{}", text_table(&t.gpus));
    }
    for line in node_lines(status) {
        let _ = writeln!(s, "{line}");
    }
    let _ = writeln!(s, "\nLast {} log lines", status.log_tail.len());
    for line in &status.log_tail {
        let _ = writeln!(s, "  {line}");
    }
    if !status.server_log_tail.is_empty() {
        let _ = writeln!(
            s,
            "\nLast {} lines of the inference server's log",
            status.server_log_tail.len()
        );
        for line in &status.server_log_tail {
            let _ = writeln!(s, "  {line}");
        }
    }
    s.push('\n');
    if let Some(url) = &ctx.dashboard_url {
        let _ = writeln!(s, "Dashboard: {url}");
    }
    if let Some(url) = &ctx.status_url {
        let _ = writeln!(s, "Status page: {url}");
    }
    let _ = writeln!(
        s,
        "Sent by pipeline-pulse on {} at {}.",
        ctx.host,
        when(now)
    );
    s
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn html_table(rows: &[Vec<String>]) -> String {
    let mut out = String::from(
        "<table cellpadding=\"4\" style=\"border-collapse:collapse;font-family:monospace\">",
    );
    for (i, row) in rows.iter().enumerate() {
        let tag = if i == 0 { "th" } else { "td" };
        out += "<tr>";
        for cell in row {
            let _ = write!(
                out,
                "<{tag} style=\"border:1px solid #ccc;text-align:left\">{}</{tag}>",
                esc(cell)
            );
        }
        out += "</tr>";
    }
    out + "</table>"
}

fn html(notifications: &[Notification], status: &Status, ctx: &Context, now: Seconds) -> String {
    let mut s = String::from("<!doctype html><html><body style=\"font-family:sans-serif\">");
    for n in notifications {
        let color = match n.kind {
            Kind::Firing | Kind::Reminder => "#b00020",
            Kind::Resolved { .. } => "#1b5e20",
            Kind::Notice => "#0d47a1",
        };
        let _ = write!(
            s,
            "<h2 style=\"color:{color}\">{}</h2><p>since {}</p><p>{}</p>",
            esc(&headline(n)),
            esc(&when(n.since)),
            esc(&n.condition.details).replace('\n', "<br>")
        );
    }
    if let Some(stacks) = stacks_shown(notifications, status) {
        let _ = write!(s, "<h3>{}</h3><ul>", esc(&stacks_heading(stacks)));
        for p in &stacks.processes {
            let _ = write!(s, "<li><code>{}</code></li>", esc(&p.summary));
        }
        s += "</ul>";
    }
    let t = tables(status, now);
    let _ = write!(s, "<h3>Progress</h3>{}", html_table(&t.progress));
    if !status.run.outlook.is_empty() {
        let _ = write!(s, "<p>Run: {}</p>", esc(&status.run.outlook));
    }
    if t.outputs.len() > 1 {
        let _ = write!(s, "<h3>Output files</h3>{}", html_table(&t.outputs));
    }
    if t.gpus.len() > 1 {
        let _ = write!(s, "<h3>GPUs</h3>{}", html_table(&t.gpus));
    }
    s += "<ul>";
    for line in node_lines(status) {
        let _ = write!(s, "<li>{}</li>", esc(&line));
    }
    s += "</ul>";
    let lines: Vec<String> = status.log_tail.iter().map(|l| esc(l)).collect();
    let _ = write!(
        s,
        "<h3>Last {} log lines</h3><pre style=\"background:#f4f4f4;padding:8px\">{}</pre>",
        lines.len(),
        lines.join("\n")
    );
    if !status.server_log_tail.is_empty() {
        let lines: Vec<String> = status.server_log_tail.iter().map(|l| esc(l)).collect();
        let _ = write!(
            s,
            "<h3>Last {} lines of the inference server's log</h3><pre style=\"background:#f4f4f4;padding:8px\">{}</pre>",
            lines.len(),
            lines.join("\n")
        );
    }
    if let Some(url) = &ctx.dashboard_url {
        let _ = write!(s, "<p><a href=\"{0}\">Dashboard</a></p>", esc(url));
    }
    if let Some(url) = &ctx.status_url {
        let _ = write!(s, "<p><a href=\"{0}\">Status page</a></p>", esc(url));
    }
    let _ = write!(
        s,
        "<p style=\"color:#666\">Sent by pipeline-pulse on {} at {}.</p></body></html>",
        esc(&ctx.host),
        esc(&when(now))
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Run;
    use crate::parse::{Parser, RunInference};
    use crate::sinks::alert::{AlertName, Condition};

    fn run() -> Status {
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for line in [
            "Processing: B1_glaive (SHORT)",
            "  400/10000 (0 err) 1.0 req/s avg_comp=300tok ETA=2.7h",
            "Traceback <script>",
        ] {
            run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), 1000.0);
        }
        Status::from_run(&run, &Default::default(), "gpu-node-01", 1840.0)
    }

    fn stalled(kind: Kind) -> Notification {
        Notification {
            kind,
            condition: Condition {
                alert: AlertName::Stalled,
                partition: Some("B1_glaive".into()),
                summary: "no progress for 14m (server idle, client waiting)".into(),
                details: "B1_glaive has made no progress.".into(),
                cause: Some(crate::rules::Cause::ServerIdleClientWaiting),
                began_at: None,
                wait_at_most: None,
            },
            since: 1840.0,
        }
    }

    fn ctx() -> Context {
        Context {
            host: "gpu-node-01".into(),
            dashboard_url: Some("http://grafana/d/pulse".into()),
            status_url: None,
            run: None,
        }
    }

    #[test]
    fn one_alert_subject_and_evidence() {
        let e = render(&[stalled(Kind::Firing)], &run(), &ctx(), 1840.0);
        assert_eq!(
            e.subject,
            "[pulse] FIRING Stalled: B1_glaive on gpu-node-01, no progress for 14m (server idle, client waiting)"
        );
        assert!(e.text.contains("B1_glaive  400"), "{}", e.text);
        assert!(e.text.contains("Last 3 log lines"));
        assert!(e.text.contains("  Traceback <script>"));
        assert!(e.text.contains("Driver process: not probed"));
        assert!(e.text.contains("Dashboard: http://grafana/d/pulse"));
        assert!(
            e.html.contains("Traceback &lt;script&gt;"),
            "HTML is escaped"
        );
        assert!(!e.html.contains("<script>"));
    }

    #[test]
    fn the_subject_names_the_run() {
        let ctx = Context {
            run: Some(crate::run_identity::RunLabel {
                run: "synth_100k".into(),
                role: crate::run_identity::Role::Worker,
            }),
            ..ctx()
        };
        let e = render(&[stalled(Kind::Firing)], &run(), &ctx, 1840.0);
        assert!(
            e.subject
                .starts_with("[pulse] FIRING Stalled: B1_glaive on gpu-node-01 (run synth_100k), "),
            "{}",
            e.subject
        );
    }

    #[test]
    fn resolved_and_batched_subjects() {
        let e = render(
            &[stalled(Kind::Resolved { lasted: 960.0 })],
            &run(),
            &ctx(),
            2800.0,
        );
        assert_eq!(
            e.subject,
            "[pulse] RESOLVED Stalled: B1_glaive on gpu-node-01, lasted 16m"
        );
        let mut down = stalled(Kind::Firing);
        down.condition.alert = AlertName::ServerDown;
        down.condition.partition = None;
        let e = render(&[stalled(Kind::Firing), down], &run(), &ctx(), 1840.0);
        assert_eq!(
            e.subject,
            "[pulse] 2 alerts on gpu-node-01: FIRING Stalled (B1_glaive), FIRING ServerDown"
        );
    }
}
