//! What `scontrol --local -o show job ID` prints, read (docs/slurm.md#asking-the-controller):
//! one line per record, `Key=value` fields separated by spaces, in the order and shapes of
//! SLURM's `slurm_sprint_job_info` (scontrol's own `_sprint_job_info` from 24.11), alike in
//! 22.05, 23.11, 24.11 and 26.05 (tests/testdata/slurm/README.md). Pure: the source runs the
//! command, this reads what it printed.

use crate::model::slurm::{ArrayTasks, JobEnv, JobState};
use crate::model::Seconds;

/// One record: its fields in the order printed, each key once (the first wins: free text
/// that comes later, a comment or a command line, cannot stand in for a field).
#[derive(Debug, Default)]
pub struct Record<'a> {
    fields: Vec<(&'a str, String)>,
}

impl<'a> Record<'a> {
    /// Reads one line. A token that is not `Key=value` continues the value before it (a path
    /// with a space, 26.05's `SubmitLine=sbatch -t 5 --wrap sleep 100`). The job's name is the
    /// user's free text: it runs to the field printed after it (` UserId=` in every release;
    /// ` HetJobIdSet=` for a heterogeneous job, ` SLUID=` where 26.05 has one), so that a name
    /// such as `a JobState=X` is a name. The fields printed before the name (`JobId`, the
    /// array's and the het job's) are text once past it: a command line's `ArrayJobId=7` does
    /// not make a job a task.
    pub fn parse(line: &'a str) -> Record<'a> {
        let mut fields: Vec<(&'a str, String)> = Vec::new();
        let mut named = false;
        let mut rest = line.trim();
        while !rest.is_empty() {
            let (token, after) = match rest.find(' ') {
                Some(i) => (&rest[..i], rest[i + 1..].trim_start()),
                None => (rest, ""),
            };
            let field = token
                .split_once('=')
                .filter(|(k, _)| is_key(k) && !(named && BEFORE_NAME.contains(k)));
            match field {
                Some(("JobName", _)) => {
                    let body = &rest["JobName=".len()..];
                    let end = AFTER_NAME.iter().filter_map(|k| body.find(k)).min();
                    let (name, after) = match end {
                        Some(i) => (&body[..i], &body[i + 1..]),
                        None => (&token["JobName=".len()..], after),
                    };
                    push(&mut fields, "JobName", name.to_owned());
                    named = true;
                    rest = after;
                    continue;
                }
                Some((key, value)) => push(&mut fields, key, value.to_owned()),
                None => {
                    if let Some((_, value)) = fields.last_mut() {
                        value.push(' ');
                        value.push_str(token);
                    }
                }
            }
            rest = after;
        }
        Record { fields }
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The job's state as the controller has it ([`JobState`]).
    pub fn state(&self) -> JobState {
        JobState {
            state: self.get("JobState").map(base_state).unwrap_or_default(),
            reason: self
                .get("Reason")
                .filter(|r| !r.is_empty() && *r != "None" && *r != "(null)")
                .map(str::to_owned),
            start_time: self.get("StartTime").and_then(time),
            end_time: self.get("EndTime").and_then(time),
            time_limit_minutes: self.get("TimeLimit").and_then(minutes),
            restart_count: self
                .get("Restarts")
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
        }
    }
}

/// The fields every release prints before `JobName=`, and `JobName` itself.
const BEFORE_NAME: [&str; 7] = [
    "JobId",
    "ArrayJobId",
    "ArrayTaskId",
    "ArrayTaskThrottle",
    "HetJobId",
    "HetJobOffset",
    "JobName",
];

/// What may follow the job's name: ` HetJobIdSet=` (a het job), ` SLUID=` (26.05, where the
/// job has one), ` UserId=` (always).
const AFTER_NAME: [&str; 3] = [" HetJobIdSet=", " SLUID=", " UserId="];

fn push<'a>(fields: &mut Vec<(&'a str, String)>, key: &'a str, value: String) {
    if !fields.iter().any(|(k, _)| *k == key) {
        fields.push((key, value));
    }
}

/// A field's name as SLURM writes them: `JobId`, `CPUs/Task`, `AllocNode:Sid`, `ReqB:S:C:T`.
fn is_key(k: &str) -> bool {
    k.starts_with(|c: char| c.is_ascii_alphabetic())
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_/:".contains(&b))
}

/// `RUNNING`; a state printed with flags (`COMPLETING+…`, as later releases may) is its base.
fn base_state(s: &str) -> String {
    s.split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
        .next()
        .unwrap_or("")
        .to_owned()
}

/// A time as `SLURM_TIME_FORMAT=%s` prints it (Unix seconds), or SLURM's default
/// `2026-12-07T07:41:51` read as UTC (the source runs scontrol with `TZ=UTC`); `Unknown`,
/// `None`, `N/A` and 0 are none.
pub fn time(s: &str) -> Option<Seconds> {
    if let Ok(n) = s.parse::<i64>() {
        return (n > 0).then_some(n as Seconds);
    }
    let t = humantime::parse_rfc3339_weak(s).ok()?;
    Some(crate::clock::unix_seconds(t)).filter(|t| *t > 0.0)
}

/// A time limit in minutes: `00:02:00`, `1-00:00:00`, `45:00` (minutes and seconds);
/// `UNLIMITED` and `Partition_Limit` are none (the partition's own limit is not the job's).
fn minutes(s: &str) -> Option<u64> {
    let (days, clock) = match s.split_once('-') {
        Some((d, rest)) => (d.parse::<u64>().ok()?, rest),
        None => (0, s),
    };
    let parts: Vec<u64> = clock
        .split(':')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let seconds = match parts[..] {
        [h, m, s] => h * 3600 + m * 60 + s,
        [m, s] => m * 60 + s,
        [m] => m * 60,
        _ => return None,
    };
    Some(days * 24 * 60 + seconds.div_ceil(60))
}

/// The job and its array's tasks from what `scontrol -o show job ID` printed, `ID` being the
/// run's job (`env.run_job_id()`: the array's for a task of one, so that the array's records
/// come in the same answer).
pub fn parse_show_job(
    text: &[u8],
    env: &JobEnv,
) -> Result<(Option<JobState>, Option<ArrayTasks>), String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_owned())?;
    let records: Vec<Record> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(Record::parse)
        .collect();
    if records.is_empty() {
        return Ok((None, env.array_job_id.as_ref().map(|_| done(env))));
    }
    if records.iter().any(|r| r.get("JobId").is_none()) {
        return Err("a record with no JobId".to_owned());
    }
    let ours = records
        .iter()
        .find(|r| r.get("JobId") == Some(env.job_id.as_str()));
    let array = env.array_job_id.as_ref().map(|array| {
        let tasks = records
            .iter()
            .filter(|r| r.get("ArrayJobId") == Some(array.as_str()));
        count_tasks(tasks, env.array_task_count)
    });
    Ok((ours.map(Record::state), array))
}

/// Whether scontrol's stderr says the controller does not hold the job (never, or forgotten
/// past MinJobAge): `slurm_load_jobs error: Invalid job id specified`, exit status 1, in every
/// release sampled (tests/testdata/slurm/scontrol-*-unknown.txt).
pub fn forgotten(stderr: &str) -> bool {
    stderr.contains("Invalid job id")
}

/// An array the controller no longer knows (past MinJobAge): every task done.
pub fn done(env: &JobEnv) -> ArrayTasks {
    count_tasks(std::iter::empty(), env.array_task_count)
}

fn count_tasks<'a, 'b: 'a>(
    tasks: impl Iterator<Item = &'a Record<'b>>,
    total: Option<u32>,
) -> ArrayTasks {
    let mut t = ArrayTasks::default();
    for task in tasks {
        let state = task.get("JobState").map(base_state).unwrap_or_default();
        // The array's own record stands for every task its ArrayTaskId names ("5-9999%10").
        let n = match task.get("ArrayTaskId") {
            Some(s) if state == "PENDING" => tasks_in(s),
            _ => 1,
        };
        match state.as_str() {
            "PENDING" | "REQUEUED" => t.pending += n,
            "RUNNING" | "COMPLETING" | "CONFIGURING" | "SUSPENDED" => t.running += n,
            "COMPLETED" => t.done += n,
            _ => t.failed += n,
        }
    }
    let listed = t.pending + t.running + t.done + t.failed;
    t.total = total.unwrap_or(listed).max(listed);
    // Finished tasks leave the list after MinJobAge: those not listed are done.
    t.done += t.total - listed;
    t
}

/// How many tasks "0-3%2", "[4,6-7]", "1-9:2" or "5" names.
fn tasks_in(s: &str) -> u32 {
    let s = s.trim_matches(|c| c == '[' || c == ']');
    let s = s.split('%').next().unwrap_or(s);
    s.split(',')
        .map(|part| {
            let (range, step) = match part.split_once(':') {
                Some((r, st)) => (r, st.parse::<u32>().unwrap_or(1).max(1)),
                None => (part, 1),
            };
            match range.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (u32, u32) = (a.parse().unwrap_or(0), b.parse().unwrap_or(0));
                    b.saturating_sub(a) / step + 1
                }
                None => 1,
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/testdata/slurm/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn job(id: &str) -> JobEnv {
        JobEnv {
            job_id: id.into(),
            ..JobEnv::default()
        }
    }

    fn state(name: &str, env: &JobEnv) -> JobState {
        parse_show_job(&sample(name), env).unwrap().0.unwrap()
    }

    /// What SLURM 22.05 itself printed, with the source's own `SLURM_TIME_FORMAT=%s`, and with
    /// its default times (tests/testdata/slurm/README.md says how each was made).
    #[test]
    fn real_answers_read_as_the_controller_meant_them() {
        let running = state("scontrol-22.05-running.txt", &job("1"));
        assert_eq!(running.state, "RUNNING");
        assert_eq!(running.reason, None, "\"None\" is no reason");
        assert_eq!(running.time_limit_minutes, Some(2));
        // 2026-12-07T07:43:51, read as UTC.
        assert_eq!(running.end_time, Some(1_796_629_431.0));
        assert_eq!(running.start_time, Some(1_796_629_311.0));
        let timeout = state("scontrol-22.05-timeout.txt", &job("1"));
        assert_eq!(
            (timeout.state.as_str(), timeout.reason.as_deref()),
            ("TIMEOUT", Some("TimeLimit"))
        );
        assert_eq!(
            state("scontrol-22.05-requeued.txt", &job("1")).restart_count,
            1
        );
        assert_eq!(
            state("scontrol-22.05-cancelled.txt", &job("1")).state,
            "CANCELLED"
        );
        let epoch = state("scontrol-22.05-epoch-running.txt", &job("1"));
        assert_eq!(epoch.state, "RUNNING");
        assert_eq!(epoch.time_limit_minutes, Some(3));
        assert_eq!(epoch.start_time, Some(1_796_662_638.0));
        assert_eq!(epoch.end_time, Some(1_796_662_818.0));
        // A job the answer does not hold is no state at all.
        assert_eq!(
            parse_show_job(&sample("scontrol-22.05-running.txt"), &job("9"))
                .unwrap()
                .0,
            None
        );
    }

    /// `scontrol show job ARRAY`: the array's own record (its pending tasks) and one per task
    /// started, this task's among them.
    #[test]
    fn an_arrays_records_count_its_tasks() {
        let task = JobEnv {
            array_job_id: Some("2".into()),
            array_task_id: Some("0".into()),
            array_task_count: Some(10),
            ..job("3")
        };
        let (state, tasks) =
            parse_show_job(&sample("scontrol-22.05-epoch-array.txt"), &task).unwrap();
        assert_eq!(state.unwrap().state, "RUNNING");
        assert_eq!(
            tasks,
            Some(ArrayTasks {
                total: 10,
                pending: 9,
                running: 1,
                failed: 0,
                done: 0
            })
        );
        // Forgotten (past MinJobAge): nothing printed, every task done.
        let (state, tasks) = parse_show_job(b"", &task).unwrap();
        assert_eq!(state, None);
        assert_eq!(tasks.unwrap().done, 10);
    }

    /// The same kinds of jobs on the later releases, each printed by that release's own
    /// scontrol (23.11.4 of Ubuntu 24.04, 24.11.5 of Debian 13, 26.05.5 of Debian unstable;
    /// tests/testdata/slurm/README.md says how and what differs): the fields read are the
    /// same, so they read as 22.05's do.
    #[test]
    fn later_releases_read_alike() {
        for release in ["23.11", "24.11", "26.05"] {
            let file = |case: &str| format!("scontrol-{release}-{case}.txt");
            let running = state(&file("epoch-running"), &job("1"));
            assert_eq!(
                (running.state.as_str(), running.reason.as_deref()),
                ("RUNNING", None),
                "{release}"
            );
            assert_eq!(running.time_limit_minutes, Some(3), "{release}");
            assert_eq!(running.restart_count, 0, "{release}");
            let (start, end) = (running.start_time.unwrap(), running.end_time.unwrap());
            assert_eq!(
                end - start,
                180.0,
                "{release}: RUNNING ends at start + limit"
            );
            // The same job, its times in scontrol's default shape (UTC there): the same times.
            let default = state(&file("running"), &job("1"));
            assert_eq!(
                (default.start_time, default.end_time),
                (Some(start), Some(end)),
                "{release}"
            );

            // The array (2, --array=0-9%2) beside it: its own record and task 0's (3).
            let task = JobEnv {
                array_job_id: Some("2".into()),
                array_task_id: Some("0".into()),
                array_task_count: Some(10),
                ..job("3")
            };
            let (ours, tasks) = parse_show_job(&sample(&file("epoch-array")), &task).unwrap();
            assert_eq!(ours.unwrap().state, "RUNNING", "{release}");
            let tasks = tasks.unwrap();
            assert_eq!(
                (
                    tasks.total,
                    tasks.pending,
                    tasks.running,
                    tasks.done,
                    tasks.failed
                ),
                (10, 9, 1, 0, 0),
                "{release}"
            );

            let cancelled = state(&file("cancelled"), &job("1"));
            assert_eq!(
                (cancelled.state.as_str(), cancelled.reason),
                ("CANCELLED", None),
                "{release}"
            );

            // Requeued while RUNNING, at its PENDING/BeginTime step: the expected start.
            let requeued = state(&file("requeued"), &job("5"));
            assert_eq!(
                (requeued.state.as_str(), requeued.reason.as_deref()),
                ("PENDING", Some("BeginTime")),
                "{release}"
            );
            assert_eq!(requeued.restart_count, 1, "{release}");
            assert_eq!(requeued.time_limit_minutes, Some(5), "{release}");
            assert!(requeued.start_time.is_some(), "{release}");

            let timeout = state(&file("timeout"), &job("4"));
            assert_eq!(
                (timeout.state.as_str(), timeout.reason.as_deref()),
                ("TIMEOUT", Some("TimeLimit")),
                "{release}"
            );
            assert_eq!(timeout.time_limit_minutes, Some(1), "{release}");
            assert!(
                timeout.end_time.unwrap() - timeout.start_time.unwrap() >= 60.0,
                "{release}"
            );
        }
        // 26.05's command line, spaces and all, is one field's value.
        let text = sample("scontrol-26.05-epoch-array.txt");
        let line = std::str::from_utf8(&text).unwrap().lines().next().unwrap();
        let r = Record::parse(line);
        assert_eq!(
            r.get("SubmitLine"),
            Some("sbatch --array=0-9%2 -t 5 --wrap sleep 100")
        );
        assert_eq!(r.get("WorkDir"), Some("/pulse"));
    }

    /// What each release writes to stderr for a job it does not hold (exit status 1, nothing
    /// on stdout): the words the source takes for "forgotten".
    #[test]
    fn every_release_says_an_unknown_id_alike() {
        for release in ["22.05", "23.11", "24.11", "26.05"] {
            let text = sample(&format!("scontrol-{release}-unknown.txt"));
            let text = String::from_utf8(text).unwrap();
            let stderr: String = text.lines().filter(|l| !l.starts_with('#')).collect();
            assert_eq!(stderr, "slurm_load_jobs error: Invalid job id specified");
            assert!(forgotten(&stderr), "{release}");
            assert!(
                text.contains("# exit status 1, 0 bytes on stdout"),
                "{release}"
            );
        }
        assert!(!forgotten(
            "slurm_load_jobs error: Unable to contact slurm controller"
        ));
    }

    #[test]
    fn fields_hold_their_spaces_and_a_name_is_only_a_name() {
        let r = Record::parse(
            "JobId=7 JobName=a JobState=CANCELLED b UserId=ana(1) JobState=RUNNING Reason=None \
             Restarts=0 TimeLimit=UNLIMITED StartTime=Unknown EndTime=Unknown \
             WorkDir=/data/my runs StdOut=/dev/null Comment=JobState=FAILED",
        );
        assert_eq!(r.get("JobName"), Some("a JobState=CANCELLED b"));
        assert_eq!(r.get("WorkDir"), Some("/data/my runs"));
        let s = r.state();
        assert_eq!(s.state, "RUNNING");
        assert_eq!(
            (s.time_limit_minutes, s.start_time, s.end_time),
            (None, None, None)
        );
        assert!(parse_show_job(b"garbage here\n", &job("7")).is_err());
    }

    /// 26.05 prints the command line (`SubmitLine=`) with its spaces, after the fields read;
    /// a het job's name is followed by `HetJobIdSet=`, 26.05's by `SLUID=` where it has one.
    #[test]
    fn a_command_line_is_text_and_names_end_where_the_next_field_starts() {
        let r = Record::parse(
            "JobId=8 JobName=train UserId=ana(1) JobState=RUNNING Reason=None \
             SubmitLine=sbatch --array=0-3 --wrap run ArrayJobId=7 JobId=9 JobName=x \
             WorkDir=/data StdErr= StdIn=/dev/null",
        );
        assert_eq!(r.get("JobId"), Some("8"));
        assert_eq!(
            r.get("ArrayJobId"),
            None,
            "a command line's words are not fields"
        );
        assert_eq!(
            r.get("SubmitLine"),
            Some("sbatch --array=0-3 --wrap run ArrayJobId=7 JobId=9 JobName=x")
        );
        assert_eq!(r.get("JobName"), Some("train"));
        assert_eq!(
            (r.get("WorkDir"), r.get("StdErr")),
            (Some("/data"), Some(""))
        );
        let array = JobEnv {
            array_job_id: Some("7".into()),
            array_task_count: Some(4),
            ..job("10")
        };
        let line = b"JobId=8 JobName=a UserId=u(1) JobState=RUNNING SubmitLine=s ArrayJobId=7\n";
        let (_, tasks) = parse_show_job(line, &array).unwrap();
        assert_eq!(tasks.unwrap().running, 0);

        let het = Record::parse(
            "JobId=5 HetJobId=5 HetJobOffset=0 JobName=a b HetJobIdSet=5-6 UserId=u(1)",
        );
        assert_eq!(het.get("JobName"), Some("a b"));
        assert_eq!(het.get("HetJobIdSet"), Some("5-6"));
        let sluid = Record::parse("JobId=5 JobName=a SLUID=s1x UserId=u(1) JobState=PENDING");
        assert_eq!(sluid.get("JobName"), Some("a"));
        assert_eq!(sluid.get("SLUID"), Some("s1x"));
        assert_eq!(sluid.state().state, "PENDING");
    }

    #[test]
    fn limits_times_and_task_strings() {
        assert_eq!(minutes("00:02:00"), Some(2));
        assert_eq!(minutes("1-00:00:00"), Some(1440));
        assert_eq!(minutes("45:30"), Some(46));
        assert_eq!(minutes("UNLIMITED"), None);
        assert_eq!(minutes("Partition_Limit"), None);
        assert_eq!(time("1796662616"), Some(1_796_662_616.0));
        assert_eq!(time("None"), None);
        assert_eq!(time("0"), None);
        assert_eq!(base_state("COMPLETING+REQUEUE"), "COMPLETING");
        assert_eq!(tasks_in("2-3%2"), 2);
        assert_eq!(tasks_in("[4,6-7]"), 3);
        assert_eq!(tasks_in("5-9999%10"), 9995);
        assert_eq!(tasks_in("1-9:2"), 5);
        assert_eq!(tasks_in("5"), 1);
    }
}
