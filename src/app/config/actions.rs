//! `[[actions]]`: commands run when an alert fires, validated into the alert engine's
//! actions. Config file only: a command the sidecar runs as its own user is never taken from
//! a flag, the environment or HTTP, and one that someone else could rewrite is refused here,
//! so `check-config` and start-up both say so, naming the key (docs/alerts.md#actions).

use super::keys;
use super::tables::{RawAction, RawCauses};
use super::{ConfigError, RawConfig};
use crate::rules::{AlertName, Cause, UnknownCause};
use crate::sinks::alert::action::{Action, Actions};
use std::collections::BTreeSet;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

impl RawConfig {
    pub(super) fn actions(&self) -> Result<Actions, ConfigError> {
        let mut names = BTreeSet::new();
        let mut list = Vec::new();
        for (i, raw) in self.actions.iter().enumerate() {
            let action = raw.validate(i)?;
            if !names.insert(action.name.clone()) {
                return Err(ConfigError::invalid(
                    format!("actions[{i}].name"),
                    format!(
                        "{:?} names another action too: give each a name of its own",
                        action.name
                    ),
                ));
            }
            list.push(action);
        }
        let secret_env = self
            .smtp_password_env
            .iter()
            .chain(
                self.webhooks
                    .iter()
                    .flat_map(|w| w.headers.values().filter_map(|h| h.env.as_ref())),
            )
            .cloned()
            .collect();
        Ok(Actions {
            list,
            dry_run: self.dry_run_actions.unwrap_or(false),
            server_url: self.server_health_url.clone(),
            secret_env,
        })
    }
}

impl RawAction {
    fn validate(&self, i: usize) -> Result<Action, ConfigError> {
        let key = |k: &str| format!("actions[{i}].{k}");
        if self.on.is_empty() {
            return Err(ConfigError::invalid(
                key("on"),
                "name the alerts it runs for (on = [\"ServerHung\"])",
            ));
        }
        let mut on = Vec::new();
        for name in &self.on {
            on.push(AlertName::parse(name).ok_or_else(|| {
                let known: Vec<&str> = AlertName::ALL.iter().map(|a| a.as_str()).collect();
                ConfigError::invalid(
                    key("on"),
                    format!(
                        "{name:?} is not an alert; the alerts are {}",
                        known.join(", ")
                    ),
                )
            })?);
        }
        let mut cause = Vec::new();
        for id in self.cause.iter().flat_map(RawCauses::ids) {
            let parsed: Cause = id
                .parse()
                .map_err(|e: UnknownCause| ConfigError::invalid(key("cause"), e.to_string()))?;
            if !cause.contains(&parsed) {
                cause.push(parsed);
            }
        }
        if self.cause.is_some() && cause.is_empty() {
            return Err(ConfigError::invalid(
                key("cause"),
                "name at least one cause id, or leave cause out to run for every cause",
            ));
        }
        let program = self.command.first().ok_or_else(|| {
            ConfigError::invalid(
                key("command"),
                "give the program and its arguments as a list (no shell)",
            )
        })?;
        runnable(Path::new(program)).map_err(|e| ConfigError::invalid(key("command"), e))?;
        let name = match &self.name {
            Some(name) => name.clone(),
            None => Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        };
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(ConfigError::invalid(
                key("name"),
                format!("{name:?}: a name is letters, digits, '-', '_' and '.'"),
            ));
        }
        let max_runs = super::count(
            &key("max_runs"),
            self.max_runs,
            1,
            (1, 100),
            "runs per episode",
        )?;
        Ok(Action {
            name,
            on,
            cause,
            command: self.command.clone(),
            timeout: keys::field::actions_timeout
                .duration_as(&key("timeout"), self.timeout.as_deref())?,
            max_runs: max_runs as u32,
            cooldown: keys::field::actions_cooldown
                .duration_as(&key("cooldown"), self.cooldown.as_deref())?,
            silenced: self.silenced.unwrap_or(false),
        })
    }
}

/// Whether the sidecar may run `program`: an absolute path (no PATH lookup another user
/// could lead astray), a file that exists and is executable, that no other user can
/// rewrite, in a folder no other user can put another file in its place.
fn runnable(program: &Path) -> Result<(), String> {
    let shown = program.display();
    if !program.is_absolute() {
        return Err(format!("{shown}: give the program's absolute path"));
    }
    let meta = std::fs::metadata(program).map_err(|e| format!("{shown}: {e}"))?;
    let mode = meta.permissions().mode();
    if !meta.is_file() {
        return Err(format!("{shown} is not a file"));
    }
    if mode & 0o111 == 0 {
        return Err(format!("{shown} is not executable (chmod +x)"));
    }
    if mode & 0o002 != 0 {
        return Err(format!(
            "{shown} is writable by others: anyone could change what the sidecar runs (chmod o-w)"
        ));
    }
    if let Some(folder) = program.parent() {
        let mode = std::fs::metadata(folder)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        // A sticky folder (/tmp) lets no one replace another user's file.
        if mode & 0o002 != 0 && mode & 0o1000 == 0 {
            return Err(format!(
                "{shown} is in {}, which is writable by others: anyone could put another program in its place",
                folder.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_command(command: &Path) -> RawConfig {
        let toml = format!(
            "[[actions]]\non = [\"ServerHung\"]\ncommand = [{:?}, \"--now\"]\n",
            command.display().to_string()
        );
        toml::from_str(&toml).unwrap()
    }

    fn script(dir: &Path, mode: u32) -> std::path::PathBuf {
        let path = dir.join(format!("fix-{mode:o}.sh"));
        std::fs::write(&path, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_good_action_takes_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let actions = with_command(&script(dir.path(), 0o755)).actions().unwrap();
        let a = &actions.list[0];
        assert_eq!(a.name, "fix-755.sh");
        assert_eq!(a.on, [AlertName::ServerHung]);
        assert_eq!(a.timeout.as_secs(), 60);
        assert_eq!(a.cooldown.as_secs(), 600);
        assert_eq!((a.max_runs, a.silenced), (1, false));
        assert!(!actions.dry_run);
    }

    #[test]
    fn commands_that_cannot_or_must_not_run_are_refused_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let cases = [
            (missing, "No such file"),
            (script(dir.path(), 0o644), "not executable"),
            (script(dir.path(), 0o757), "writable by others"),
            ("fix.sh".into(), "absolute path"),
        ];
        for (path, said) in cases {
            let err = with_command(&path).actions().unwrap_err().to_string();
            assert!(err.contains("`actions[0].command`"), "{err}");
            assert!(err.contains(said), "{err}");
        }
    }

    #[test]
    fn the_variables_holding_secrets_are_named_for_removal() {
        let raw: RawConfig = toml::from_str(
            "smtp_password_env = \"SMTP_PW\"\n[[webhooks]]\nurl = \"http://h:1/\"\n[webhooks.headers]\nAuthorization = { env = \"HOOK_TOKEN\" }\n",
        )
        .unwrap();
        assert_eq!(raw.actions().unwrap().secret_env, ["SMTP_PW", "HOOK_TOKEN"]);
    }

    #[test]
    fn a_cause_is_one_id_or_a_list_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(dir.path(), 0o755);
        let mut raw = with_command(&path);
        raw.actions[0].cause = Some(RawCauses::One("server_hung".into()));
        assert_eq!(raw.actions().unwrap().list[0].cause, [Cause::ServerHung]);
        let toml = format!(
            "[[actions]]\non = [\"Stalled\"]\ncause = [\"server_hung\", \"server_crashed\"]\ncommand = [{:?}]\n",
            path.display().to_string()
        );
        let raw: RawConfig = toml::from_str(&toml).unwrap();
        assert_eq!(
            raw.actions().unwrap().list[0].cause,
            [Cause::ServerHung, Cause::ServerCrashed]
        );
        assert!(with_command(&path).actions().unwrap().list[0]
            .cause
            .is_empty());
    }

    /// A cause is an id: words (what the summary-matching took) are refused by key, with the
    /// id to write instead, and so is an id that is no cause's or an empty list.
    #[test]
    fn an_unknown_cause_is_refused_naming_the_key_and_the_id_meant() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(dir.path(), 0o755);
        for (cause, said) in [
            (
                RawCauses::One("server hung".into()),
                "did you mean server_hung?",
            ),
            (
                RawCauses::Many(vec!["server_hung".into(), "server_sad".into()]),
                "\"server_sad\" is not a cause",
            ),
            (RawCauses::Many(Vec::new()), "at least one cause id"),
        ] {
            let mut raw = with_command(&path);
            raw.actions[0].cause = Some(cause);
            let err = raw.actions().unwrap_err().to_string();
            assert!(err.contains("`actions[0].cause`"), "{err}");
            assert!(err.contains(said), "{err}");
        }
    }

    #[test]
    fn unknown_alerts_and_twin_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = script(dir.path(), 0o755);
        let mut raw = with_command(&path);
        raw.actions[0].on = vec!["ServerSad".into()];
        let err = raw.actions().unwrap_err().to_string();
        assert!(err.contains("`actions[0].on`"), "{err}");
        let mut raw = with_command(&path);
        raw.actions.push(raw.actions[0].clone());
        let err = raw.actions().unwrap_err().to_string();
        assert!(err.contains("`actions[1].name`"), "{err}");
    }
}
