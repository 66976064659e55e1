//! The picture in an alert email: the last hours of the run (completed requests, tok/s) with
//! the alert's time shaded, and a GPU utilization strip, as a PNG.
//!
//! Drawn in-process with tiny-skia (pure Rust, no system library, no font): the chart has no
//! text of its own, the email's HTML says what it shows and gives the figures. Its size is
//! fixed and its points thinned to one per pixel column, so the time and memory a rendering
//! takes are bounded whatever the history holds.

use crate::model::history::{History, Series};
use crate::model::Seconds;
use tiny_skia::{Color, Paint, PathBuilder, Pixmap, Rect, Stroke, Transform};

pub const WIDTH: u32 = 720;
pub const HEIGHT: u32 = 300;

/// The window an email's chart covers: the last 6 hours, or the run if shorter.
pub const WINDOW: f64 = 6.0 * 3600.0;

/// Where the panels lie, top to bottom: completed, tok/s, the GPU strip.
const PAD: f32 = 8.0;
const PROGRESS: (f32, f32) = (8.0, 118.0);
const RATE: (f32, f32) = (126.0, 216.0);
const GPUS: (f32, f32) = (224.0, 292.0);

fn color(r: u8, g: u8, b: u8, a: u8) -> Color {
    Color::from_rgba8(r, g, b, a)
}

/// The tok/s line of the email's text: up to 48 points over what history there is in the
/// window, so that a stall in a run's first minutes (a wrong flag, a dead server) comes with
/// its few points; none below two.
pub fn sparkline(history: &History, now: f64) -> Option<String> {
    let t0 = now - WINDOW;
    let series = history.run.get("tokens_per_second")?;
    let span = history.covered_since(t0);
    let step = (span / 48.0).max(history.resolution);
    let rate: Vec<f64> = series
        .since(t0, step)
        .into_iter()
        .map(|(_, v)| f64::from(v))
        .collect();
    (rate.len() >= 2).then(|| {
        format!(
            "tok/s, last {}: {}",
            crate::human::human(span),
            crate::human::sparkline(&rate)
        )
    })
}

/// Renders the chart; `shade` are the spans (start, end) to shade, the alert's time. `None`:
/// no history yet, nothing to draw (not a failure).
pub fn render(
    history: &History,
    shade: &[(Seconds, Seconds)],
    now: Seconds,
) -> Result<Option<Vec<u8>>, String> {
    #[cfg(debug_assertions)]
    if std::env::var_os("PULSE_DEBUG_CHART_FAILURE").is_some() {
        return Err("rendering failed on purpose (PULSE_DEBUG_CHART_FAILURE)".to_owned());
    }
    let completed = history.run.get("completed").filter(|s| !s.is_empty());
    let Some(completed) = completed else {
        return Ok(None);
    };
    let oldest = completed.points().next().map_or(now, |(t, _)| f64::from(t));
    let t0 = oldest.max(now - WINDOW);
    let t1 = now.max(t0 + 1.0);
    let width = f64::from(WIDTH) - 2.0 * f64::from(PAD);
    let x = |t: f64| (f64::from(PAD) + (t - t0) / (t1 - t0) * width) as f32;
    // One point per pixel column at most.
    let step = ((t1 - t0) / width).max(history.resolution);
    let mut pixmap = Pixmap::new(WIDTH, HEIGHT).ok_or("cannot allocate the picture")?;
    pixmap.fill(Color::WHITE);
    for (top, bottom) in [PROGRESS, RATE, GPUS] {
        fill(
            &mut pixmap,
            PAD,
            top,
            WIDTH as f32 - PAD,
            bottom,
            color(248, 248, 248, 255),
        );
    }
    for (start, end) in shade {
        let (a, b) = (x(start.max(t0)), x(end.min(t1)));
        if b >= a {
            fill(
                &mut pixmap,
                a,
                PROGRESS.0,
                (b - a).max(2.0) + a,
                RATE.1,
                color(176, 0, 32, 40),
            );
        }
    }
    line(
        &mut pixmap,
        completed,
        t0,
        step,
        &x,
        PROGRESS,
        color(59, 125, 216, 255),
    );
    if let Some(rate) = history.run.get("tokens_per_second") {
        line(
            &mut pixmap,
            rate,
            t0,
            step,
            &x,
            RATE,
            color(216, 112, 59, 255),
        );
    }
    let rows = history.gpus.len().max(1) as f32;
    let row_height = (GPUS.1 - GPUS.0) / rows;
    let cell = ((history.resolution.max(step)) / (t1 - t0) * width) as f32;
    for (r, series) in history.gpus.values().enumerate() {
        let Some(util) = series.get("utilization") else {
            continue;
        };
        let top = GPUS.0 + r as f32 * row_height;
        for (t, u) in util.since(t0, step) {
            let u = u.clamp(0.0, 1.0);
            // Darker is busier, as on the status page.
            let shade = (235.0 - 170.0 * u) as u8;
            fill(
                &mut pixmap,
                x(f64::from(t)),
                top,
                x(f64::from(t)) + cell.max(1.0),
                top + row_height - 1.0,
                color(shade / 2, shade, shade / 2, 255),
            );
        }
    }
    pixmap
        .encode_png()
        .map(Some)
        .map_err(|e| format!("cannot encode the picture: {e}"))
}

fn fill(pixmap: &mut Pixmap, x0: f32, y0: f32, x1: f32, y1: f32, c: Color) {
    if let Some(rect) = Rect::from_ltrb(x0, y0, x1, y1) {
        let mut paint = Paint::default();
        paint.set_color(c);
        pixmap.fill_rect(rect, &paint, Transform::identity(), None);
    }
}

/// A series as a line in the band `(top, bottom)`, scaled from 0 to its largest value.
fn line(
    pixmap: &mut Pixmap,
    series: &Series,
    t0: f64,
    step: f64,
    x: &dyn Fn(f64) -> f32,
    (top, bottom): (f32, f32),
    c: Color,
) {
    let points = series.since(t0, step);
    let max = points
        .iter()
        .map(|(_, v)| *v)
        .fold(0.0f32, f32::max)
        .max(1.0);
    let y = |v: f32| bottom - 4.0 - (bottom - top - 8.0) * (v / max).max(0.0);
    let mut path = PathBuilder::new();
    for (i, (t, v)) in points.iter().enumerate() {
        let (px, py) = (x(f64::from(*t)), y(*v));
        if i == 0 {
            path.move_to(px, py);
        } else {
            path.line_to(px, py);
        }
    }
    if points.len() == 1 {
        // One point: a short flat stroke, so it shows.
        let (px, py) = (x(f64::from(points[0].0)), y(points[0].1));
        path.line_to(px + 3.0, py);
    }
    let Some(path) = path.finish() else {
        return;
    };
    let mut paint = Paint::default();
    paint.set_color(c);
    paint.anti_alias = true;
    let stroke = Stroke {
        width: 2.0,
        ..Stroke::default()
    };
    pixmap.stroke_path(&path, &paint, &stroke, Transform::identity(), None);
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::Run;
    use crate::parse::{Parser, RunInference};

    #[test]
    fn no_history_is_no_picture_and_no_failure() {
        assert_eq!(render(&History::default(), &[], 1_800_000_000.0), Ok(None));
    }

    /// A run's history at 30 s for `points` points, as the recorder samples it.
    fn sampled(points: u32) -> (History, f64) {
        let mut history = History::default();
        let start = 1_800_000_000.0;
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for i in 0..points {
            let t = start + f64::from(i) * 30.0;
            let header = ["Processing: A".to_owned(), "A: 100000 prompts".to_owned()];
            let progress = format!("  {}/100000 (0 err) 1.0 req/s avg_comp=200tok", i * 10);
            let lines = if i == 0 { &header[..] } else { &[] };
            for line in lines.iter().chain([&progress]) {
                run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), t);
            }
            history.sample(&run, t);
        }
        (history, start + f64::from(points) * 30.0)
    }

    #[test]
    fn the_sparkline_draws_what_history_there_is() {
        // Minutes in (the rate needs a few reports first): what there is, not nothing.
        let (history, now) = sampled(12);
        let line = sparkline(&history, now).expect("a line from minutes of history");
        let (label, drawn) = line.split_once(": ").unwrap();
        assert!(
            label.starts_with("tok/s, last ") && label.ends_with('m') && !label.contains('h'),
            "{line}"
        );
        assert!((2..=12).contains(&drawn.chars().count()), "{line}");
        // Hours in: at most 48 points over them.
        let (history, now) = sampled(400);
        let line = sparkline(&history, now).unwrap();
        let drawn = line.split_once(": ").unwrap().1;
        assert!((40..=49).contains(&drawn.chars().count()), "{line}");
        // One point is no line.
        let (history, now) = sampled(1);
        assert_eq!(sparkline(&history, now), None);
    }

    #[test]
    fn the_picture_has_its_size_and_lines_in_its_panels() {
        let mut history = History::default();
        let start = 1_800_000_000.0;
        let mut run = Run::new(&["log".into()]);
        let mut parser = Parser::RunInference(RunInference);
        for i in 0..200u32 {
            let t = start + f64::from(i) * 30.0;
            for line in [
                "Processing: A".to_owned(),
                "A: 100000 prompts".to_owned(),
                format!("  {}/100000 (0 err) 1.0 req/s avg_comp=200tok", i * 10),
            ] {
                run.ingest(0, line.as_bytes(), parser.parse(line.as_bytes()), t);
            }
            history.sample(&run, t);
        }
        let now = start + 200.0 * 30.0;
        let png = render(&history, &[(now - 1800.0, now)], now)
            .unwrap()
            .unwrap();
        let picture = Pixmap::decode_png(&png).unwrap();
        assert_eq!((picture.width(), picture.height()), (WIDTH, HEIGHT));
        let blue = picture
            .pixels()
            .iter()
            .filter(|p| p.blue() > 150 && p.red() < 120)
            .count();
        assert!(blue > 200, "the progress line is drawn: {blue} blue pixels");
        // The shaded half hour, at the right edge of the progress panel.
        let at = |x: u32, y: u32| picture.pixel(x, y).unwrap();
        assert!(at(WIDTH - 20, 20).green() < at(20, 20).green(), "shaded");
    }
}
