use super::*;

/// The text lines (and times) `lines` hands out for `raw`, line after line.
fn unwrap(envelope: Envelope, raw: &[&str]) -> (Vec<String>, Vec<Option<f64>>, usize) {
    let mut u = Unwrap::new(envelope);
    let (mut texts, mut times, mut unreadable) = (Vec::new(), Vec::new(), 0);
    for line in raw {
        u.lines(line.as_bytes(), 3600, &mut |piece| match piece {
            Piece::Text(t, at) => {
                texts.push(String::from_utf8_lossy(t).into_owned());
                times.push(at);
            }
            Piece::Unreadable => unreadable += 1,
        });
    }
    (texts, times, unreadable)
}

#[test]
fn times_are_read_with_their_zone_or_as_local_time() {
    let utc = 1_796_396_400.0; // 2026-12-04T15:00:00Z
    assert_eq!(timestamp("2026-12-04T15:00:00Z", 0), Some(utc));
    assert_eq!(
        timestamp("2026-12-04T15:00:00.123456789Z", 0),
        Some(utc + 0.123456789)
    );
    assert_eq!(timestamp("2026-12-04T16:00:00+01:00", 0), Some(utc));
    assert_eq!(timestamp("2026-12-04T10:00:00-0500", 0), Some(utc));
    // Python's asctime: local time, a comma before the milliseconds.
    assert_eq!(timestamp("2026-12-04 16:00:00,250", 3600), Some(utc + 0.25));
    for bad in [
        "2026-13-04T15:00:00Z",
        "2026-12-04T15:00",
        "yesterday",
        "2026-12-04T15:00:00+1",
    ] {
        assert_eq!(timestamp(bad, 0), None, "{bad}");
    }
}

#[test]
fn auto_unwraps_json_log_objects_and_passes_other_lines_as_text() {
    let (texts, times, unreadable) = unwrap(
        Envelope::Auto,
        &[
            "Loading model…",
            r#"{"asctime": "2026-12-04 16:00:00,000", "levelname": "INFO", "name": "driver", "message": "Processing: B1 (SHORT)"}"#,
            r#"{"event": "  10/40 (0 err) 2.0 req/s", "level": "info", "timestamp": "2026-12-04T15:00:01Z"}"#,
            r#"{"msg": "boom", "exc_info": "Traceback (most recent call last):\n  File \"x.py\", line 1\nValueError: x"}"#,
            // Not a log record: a JSON object printed as text is text.
            r#"{"id": 1, "text": "hi"}"#,
            "Traceback (most recent call last):",
        ],
    );
    assert_eq!(
        texts,
        [
            "Loading model…",
            "Processing: B1 (SHORT)",
            "  10/40 (0 err) 2.0 req/s",
            "boom",
            "Traceback (most recent call last):",
            "  File \"x.py\", line 1",
            "ValueError: x",
            r#"{"id": 1, "text": "hi"}"#,
            "Traceback (most recent call last):",
        ]
    );
    assert_eq!(times[1], Some(1_796_396_400.0));
    assert_eq!(times[2], Some(1_796_396_401.0));
    assert_eq!(times[3], None);
    assert_eq!(unreadable, 0);
}

#[test]
fn a_cut_json_object_in_a_json_log_is_unreadable_not_text() {
    let (texts, _, unreadable) = unwrap(
        Envelope::Auto,
        &[
            r#"{"message": "Processing: B1 (SHORT)"}"#,
            r#"{"message": "  10/40 (0 err) 2.0 re"#,
        ],
    );
    assert_eq!(texts, ["Processing: B1 (SHORT)"]);
    assert_eq!(unreadable, 1);
    // `plain` takes every line as text, JSON or not.
    let (texts, _, _) = unwrap(Envelope::Plain, &[r#"{"message": "x"}"#]);
    assert_eq!(texts, [r#"{"message": "x"}"#]);
}

#[test]
fn cri_records_are_unwrapped_and_cut_lines_joined() {
    let (texts, times, unreadable) = unwrap(
        Envelope::Auto,
        &[
            "2026-12-04T15:00:00.000000001Z stdout F Processing: B1 (SHORT)",
            // tqdm's frames in one record: the follower ends lines at `\r` too.
            "2026-12-04T15:00:01Z stderr P ",
            "B1:  10%|█         | 4/40",
            "B1:  20%|██        | 8/4",
            // The rest of the cut frame, in the next record.
            "2026-12-04T15:00:02Z stderr F 0 [00:01<00:04, 8.00it/s]",
            "2026-12-04T15:00:03Z stdout F ",
        ],
    );
    assert_eq!(
        texts,
        [
            "Processing: B1 (SHORT)",
            "B1:  10%|█         | 4/40",
            "B1:  20%|██        | 8/40 [00:01<00:04, 8.00it/s]",
        ]
    );
    assert_eq!(times[0], Some(1_796_396_400.000000001));
    assert_eq!(times[1], Some(1_796_396_401.0));
    assert_eq!(times[2], Some(1_796_396_402.0));
    // A line of a CRI log without a header is the rest of a record split at `\r`, never an
    // unreadable one; a header whose time is not a time is.
    assert_eq!(unreadable, 0);
    let (_, _, unreadable) = unwrap(Envelope::Cri, &["2026-12-04T25:00:00Z stdout F x"]);
    assert_eq!(unreadable, 1);
}

#[test]
fn a_cut_cri_line_waits_for_its_end_and_is_pending_meanwhile() {
    let mut u = Unwrap::new(Envelope::Cri);
    let mut texts = Vec::new();
    u.lines(b"2026-12-04T15:00:01Z stderr P B1:  20%|", 0, &mut |p| {
        texts.push(format!("{p:?}"))
    });
    assert!(texts.is_empty());
    assert_eq!(u.pending(), Some(&b"B1:  20%|"[..]));
    u.lines(b"2026-12-04T15:00:01Z stderr F ## | 8/40", 0, &mut |p| {
        if let Piece::Text(t, _) = p {
            texts.push(String::from_utf8_lossy(t).into_owned())
        }
    });
    assert_eq!(texts, ["B1:  20%|## | 8/40"]);
    assert_eq!(u.pending(), None);
}

#[test]
fn docker_json_file_records_are_unwrapped_and_cut_lines_joined() {
    let (texts, times, unreadable) = unwrap(
        Envelope::Auto,
        &[
            r#"{"log":"Processing: B1 (SHORT)\n","stream":"stdout","time":"2026-12-04T15:00:00.5Z"}"#,
            r#"{"log":"\rB1:  10%|█         | 4/40\rB1:  20%|██  ","stream":"stderr","time":"2026-12-04T15:00:01Z"}"#,
            r#"{"log":"      | 8/40\n","stream":"stderr","time":"2026-12-04T15:00:02Z"}"#,
            "garbage",
        ],
    );
    assert_eq!(
        texts,
        [
            "Processing: B1 (SHORT)",
            "B1:  10%|█         | 4/40",
            "B1:  20%|██        | 8/40",
        ]
    );
    assert_eq!(times[0], Some(1_796_396_400.5));
    assert_eq!(unreadable, 1);
}

#[test]
fn an_envelope_found_before_a_restart_is_kept() {
    let mut u = Unwrap::new(Envelope::Auto);
    u.assume(Envelope::Cri);
    assert_eq!(u.chosen(), Some(Envelope::Cri));
    let mut u = Unwrap::new(Envelope::Auto);
    u.lines(br#"{"message": "x"}"#, 0, &mut |_| {});
    assert_eq!(u.chosen(), Some(Envelope::Json));
    let mut u = Unwrap::new(Envelope::Auto);
    u.lines(b"plain", 0, &mut |_| {});
    assert_eq!(u.chosen(), Some(Envelope::Plain));
}

#[test]
fn names_round_trip() {
    for e in [
        Envelope::Auto,
        Envelope::Plain,
        Envelope::Json,
        Envelope::Cri,
        Envelope::Docker,
    ] {
        assert_eq!(e.as_str().parse::<Envelope>(), Ok(e));
    }
}

/// Every sample in `tests/testdata/envelopes/` (made with the real loggers and tqdm, and with
/// ports of the container runtimes' writers, as each `.md` says) unwraps to the lines its
/// `.md` lists under "Text inside".
#[test]
fn every_envelope_sample_unwraps_to_the_text_its_notes_list() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/envelopes");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let notes = std::fs::read_to_string(path.with_extension("md")).unwrap();
        let inside = notes
            .split("## Text inside")
            .nth(1)
            .expect("a Text inside section");
        let want: Vec<&str> = inside
            .split("```")
            .nth(1)
            .expect("a fenced list")
            .lines()
            .skip(1)
            .collect();
        let raw = std::fs::read(&path).unwrap();
        let mut u = Unwrap::new(Envelope::Auto);
        let mut got = Vec::new();
        // As the follower reads a container's log once it is found to be one: lines end at
        // `\n` alone.
        let container = cri_header(&raw).is_some() || raw.starts_with(b"{\"log\":");
        let ends = |b: &u8| *b == b'\n' || (!container && *b == b'\r');
        for line in raw.split(ends) {
            if line.is_empty() {
                continue;
            }
            u.lines(line, 0, &mut |p| match p {
                Piece::Text(t, _) => got.push(String::from_utf8_lossy(t).into_owned()),
                Piece::Unreadable => panic!("{}: an unreadable envelope", path.display()),
            });
        }
        assert_eq!(got, want, "{}", path.display());
        checked += 1;
    }
    assert!(checked >= 7, "only {checked} samples");
}
