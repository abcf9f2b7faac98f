//! The ACL file (`aclfile`): one `user <name> <rules...>` line per user,
//! as ACL LIST shows them. Loading is all or nothing: any bad line leaves
//! the users as they were, and the error names every bad line. Saving
//! writes a temporary file beside it, syncs it and renames it over the
//! old one, so a crash leaves either file whole.

use std::io::Write;
use std::path::Path;

use super::user::{merge_selector_arguments, UserRules};
use super::{has_spaces, User};

/// Parses an ACL file's text (`name` is the file's name for errors).
/// `all_channels`: `acl-pubsub-default allchannels`.
pub fn parse(
    name: &str,
    text: &str,
    all_channels: bool,
) -> Result<Vec<(Vec<u8>, UserRules)>, String> {
    let mut errors = String::new();
    let mut users: Vec<(Vec<u8>, UserRules)> = Vec::new();
    for (i, line) in text.split('\n').enumerate() {
        let number = i + 1;
        let line = line.trim_matches([' ', '\t', '\r', '\n']);
        if line.is_empty() {
            continue;
        }
        let words: Vec<&str> = line.split(' ').collect();
        if words[0] != "user" || words.len() < 2 {
            errors.push_str(&format!(
                "{name}:{number} should start with user keyword followed by the username. "
            ));
            continue;
        }
        let username = words[1].as_bytes();
        if has_spaces(username) {
            errors.push_str(&format!(
                "'{name}:{number}: username '{}' contains invalid characters. ",
                words[1]
            ));
            continue;
        }
        if users.iter().any(|(n, _)| n == username) {
            errors.push_str(&format!(
                "WARNING: Duplicate user '{}' found on line {number}. ",
                words[1]
            ));
            continue;
        }
        let args: Vec<&[u8]> = words[2..].iter().map(|w| w.as_bytes()).collect();
        let Ok(merged) = merge_selector_arguments(&args) else {
            errors.push_str(&format!(
                "{name}:{number}: Unmatched parenthesis in selector definition."
            ));
            continue;
        };
        let mut rules = UserRules::new_user(all_channels);
        let mut syntax_error = false;
        for op in &merged {
            let op = String::from_utf8_lossy(op);
            let op = op.trim_matches(['\t', '\r', '\n']);
            if let Err(e) = rules.apply(op.as_bytes()) {
                if e == super::RuleError::UnknownCommand {
                    errors.push_str(&format!(
                        "{name}:{number}: Error in applying operation '{op}': {}. ",
                        e.text()
                    ));
                } else if !syntax_error {
                    // Only the first: later ones may follow from it.
                    errors.push_str(&format!("{name}:{number}: {}. ", e.text()));
                    syntax_error = true;
                }
            }
        }
        users.push((username.to_vec(), rules));
    }
    if errors.is_empty() {
        Ok(users)
    } else {
        errors.push_str(
            "WARNING: ACL errors detected, no change to the previously active ACL rules was \
             performed",
        );
        Err(errors)
    }
}

pub fn load(path: &Path, all_channels: bool) -> Result<Vec<(Vec<u8>, UserRules)>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("Error loading ACLs, opening file '{}': {e}", path.display()))?;
    parse(&path.display().to_string(), &text, all_channels)
}

/// The file's text for `users` (in name order).
pub fn render(users: &[std::sync::Arc<User>]) -> String {
    let mut text = String::new();
    for user in users {
        text.push_str(&user.line());
        text.push('\n');
    }
    text
}

pub fn save(path: &Path, users: &[std::sync::Arc<User>]) -> std::io::Result<()> {
    let text = render(users);
    let mut temp = path.as_os_str().to_owned();
    temp.push(format!(".tmp-{}", std::process::id()));
    let temp = std::path::PathBuf::from(temp);
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_file_loads_and_a_bad_line_spoils_all() {
        let users = parse(
            "users.acl",
            "user default on nopass ~* &* +@all\n\nuser app on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~app:* resetchannels -@all +@read (+set ~x)\n",
            false,
        )
        .unwrap();
        assert_eq!(users.len(), 2);
        assert!(users[1].1.password_ok(b"pw"));
        assert_eq!(users[1].1.selectors.len(), 2);

        let err = parse(
            "users.acl",
            "user a on +nosuch\nbogus line\nuser a on\n",
            false,
        )
        .unwrap_err();
        assert!(
            err.contains("users.acl:1: Error in applying operation '+nosuch'"),
            "{err}"
        );
        assert!(
            err.contains("users.acl:2 should start with user keyword"),
            "{err}"
        );
        assert!(err.contains("Duplicate user 'a' found on line 3"), "{err}");
        assert!(err.ends_with("no change to the previously active ACL rules was performed"));
    }
}
