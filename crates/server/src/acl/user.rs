//! A user's rules: enabled or not, passwords (kept only as SHA-256 hex
//! digests), and selectors, the first of which is the root one that rules
//! outside parentheses change. `UserRules` is a value: ACL SETUSER applies
//! a whole list of rules to a copy and installs it only if all of them
//! applied, so a bad rule changes nothing.

use sha2::{Digest, Sha256};

use super::selector::Selector;
use super::RuleError;

#[derive(Clone, Debug)]
pub struct UserRules {
    pub enabled: bool,
    pub nopass: bool,
    /// `Some(true)`: sanitize-payload; `Some(false)`: skip-sanitize-payload.
    pub sanitize_payload: Option<bool>,
    /// SHA-256 digests, lowercase hex, in the order added.
    pub passwords: Vec<String>,
    /// `selectors[0]` is the root selector.
    pub selectors: Vec<Selector>,
    /// The root selector allows every command, key and channel: calls
    /// need no check (the default user's case).
    pub unrestricted: bool,
    /// `acl-pubsub-default allchannels`: selectors created (and `reset`)
    /// allow every channel. Set from the server's value before rules are
    /// applied; not part of the user's description.
    pub all_channels_default: bool,
}

impl Default for UserRules {
    /// A new user: off, no password, allowed nothing.
    fn default() -> UserRules {
        UserRules {
            enabled: false,
            nopass: false,
            sanitize_payload: None,
            passwords: Vec::new(),
            selectors: vec![Selector::default()],
            unrestricted: false,
            all_channels_default: false,
        }
    }
}

pub fn hash_password(password: &[u8]) -> String {
    let digest = Sha256::digest(password);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn valid_hash(hash: &[u8]) -> bool {
    hash.len() == 64 && hash.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl UserRules {
    /// A new user when `acl-pubsub-default` is `all_channels` or not.
    pub fn new_user(all_channels: bool) -> UserRules {
        let mut rules = UserRules {
            all_channels_default: all_channels,
            ..UserRules::default()
        };
        rules.selectors[0].all_channels = all_channels;
        rules
    }

    /// The default user as Redis creates it: on, nopass, everything.
    pub fn everything() -> UserRules {
        let mut rules = UserRules::default();
        for rule in ["+@all", "~*", "&*", "on", "nopass"] {
            rules
                .apply(rule.as_bytes())
                .expect("the default user's rules are valid");
        }
        rules
    }

    pub fn root(&self) -> &Selector {
        &self.selectors[0]
    }

    /// Applies one rule (Redis's ACLSetUser); the caller has merged a
    /// parenthesized selector into one argument.
    pub fn apply(&mut self, op: &[u8]) -> Result<(), RuleError> {
        self.apply_rule(op)?;
        let root = self.root();
        self.unrestricted = root.all_commands && root.all_keys && root.all_channels;
        Ok(())
    }

    fn apply_rule(&mut self, op: &[u8]) -> Result<(), RuleError> {
        if op.is_empty() {
            return Ok(());
        }
        let lower = op.to_ascii_lowercase();
        match lower.as_slice() {
            b"on" => self.enabled = true,
            b"off" => self.enabled = false,
            b"skip-sanitize-payload" => self.sanitize_payload = Some(false),
            b"sanitize-payload" => self.sanitize_payload = Some(true),
            b"nopass" => {
                self.nopass = true;
                self.passwords.clear();
            }
            b"resetpass" => {
                self.nopass = false;
                self.passwords.clear();
            }
            b"clearselectors" => self.selectors.truncate(1),
            b"reset" => {
                let channels = if self.all_channels_default {
                    "allchannels"
                } else {
                    "resetchannels"
                };
                for rule in [
                    "resetpass",
                    "resetkeys",
                    "resetchannels",
                    channels,
                    "off",
                    "sanitize-payload",
                    "clearselectors",
                    "-@all",
                ] {
                    self.apply_rule(rule.as_bytes())
                        .expect("reset's rules are valid");
                }
            }
            _ => match op[0] {
                b'>' | b'#' => {
                    let hash = if op[0] == b'>' {
                        hash_password(&op[1..])
                    } else if valid_hash(&op[1..]) {
                        String::from_utf8_lossy(&op[1..]).into_owned()
                    } else {
                        return Err(RuleError::BadHash);
                    };
                    if !self.passwords.contains(&hash) {
                        self.passwords.push(hash);
                    }
                    self.nopass = false;
                }
                b'<' | b'!' => {
                    let hash = if op[0] == b'<' {
                        hash_password(&op[1..])
                    } else if valid_hash(&op[1..]) {
                        String::from_utf8_lossy(&op[1..]).into_owned()
                    } else {
                        return Err(RuleError::BadHash);
                    };
                    let at = self
                        .passwords
                        .iter()
                        .position(|p| *p == hash)
                        .ok_or(RuleError::NoSuchPassword)?;
                    self.passwords.remove(at);
                }
                b'(' if op.last() == Some(&b')') => {
                    let mut selector = Selector::default();
                    selector.all_channels = self.all_channels_default;
                    let inner = &op[1..op.len() - 1];
                    for rule in inner.split(|&b| b == b' ').filter(|r| !r.is_empty()) {
                        selector.apply(rule)?;
                    }
                    self.selectors.push(selector);
                }
                _ => self.selectors[0].apply(op)?,
            },
        }
        Ok(())
    }

    /// Whether `password` opens this user (constant time per digest).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        if self.nopass {
            return true;
        }
        let hashed = hash_password(password);
        self.passwords.iter().fold(false, |ok, p| {
            ok | same_secret(p.as_bytes(), hashed.as_bytes())
        })
    }

    /// The flags ACL GETUSER lists, in Redis's order.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// Everything after `user <name> ` in ACL LIST and the ACL file.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        for flag in self.flags() {
            out.push_str(flag);
            out.push(' ');
        }
        for password in &self.passwords {
            out.push('#');
            out.push_str(password);
            out.push(' ');
        }
        out.push_str(&self.selectors[0].describe());
        for selector in &self.selectors[1..] {
            out.push_str(" (");
            out.push_str(&selector.describe());
            out.push(')');
        }
        out
    }
}

/// Constant-time comparison, so the response time does not tell how much
/// of a guess was right.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Joins the arguments of a selector written over several arguments
/// (`(+get`, `~x)`) into one, as Redis's ACLMergeSelectorArguments; an
/// unclosed parenthesis is an error naming where it opened.
pub fn merge_selector_arguments(args: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    let mut merged = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, &arg) in args.iter().enumerate() {
        if let Some((_, selector)) = open.as_mut() {
            selector.push(b' ');
            selector.extend_from_slice(arg);
            if arg.last() == Some(&b')') {
                merged.push(open.take().expect("open").1);
            }
            continue;
        }
        if arg.first() == Some(&b'(') && arg.last() != Some(&b')') {
            open = Some((i, arg.to_vec()));
            continue;
        }
        merged.push(arg.to_vec());
    }
    match open {
        Some((at, _)) => Err(format!(
            "Unmatched parenthesis in acl selector starting at '{}'.",
            String::from_utf8_lossy(args[at])
        )),
        None => Ok(merged),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(list: &[&str]) -> UserRules {
        let mut rules = UserRules::default();
        for rule in list {
            rules.apply(rule.as_bytes()).unwrap();
        }
        rules
    }

    #[test]
    fn descriptions_are_redis_s() {
        assert_eq!(UserRules::everything().describe(), "on nopass ~* &* +@all");
        assert_eq!(UserRules::default().describe(), "off resetchannels -@all");
        assert_eq!(
            rules(&["on", ">pw", "~app:*", "+@read", "(+set ~x)"]).describe(),
            "on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~app:* \
             resetchannels -@all +@read (~x resetchannels -@all +set)"
        );
    }

    #[test]
    fn passwords_are_kept_hashed_and_checked() {
        let r = rules(&[">one", ">two"]);
        assert!(r.password_ok(b"one") && r.password_ok(b"two"));
        assert!(!r.password_ok(b"three"));
        let mut r = r;
        r.apply(b"<one").unwrap();
        assert!(!r.password_ok(b"one"));
        assert_eq!(r.apply(b"<one"), Err(RuleError::NoSuchPassword));
        assert_eq!(r.apply(b"#abc"), Err(RuleError::BadHash));
        r.apply(b"nopass").unwrap();
        assert!(r.password_ok(b"anything") && r.passwords.is_empty());
        r.apply(b"resetpass").unwrap();
        assert!(!r.password_ok(b""));
    }

    #[test]
    fn reset_returns_to_a_new_user_with_sanitize_payload() {
        let mut r = UserRules::everything();
        r.apply(b"reset").unwrap();
        assert_eq!(r.describe(), "off sanitize-payload resetchannels -@all");
        assert!(!r.unrestricted);
    }

    #[test]
    fn selectors_merge_across_arguments() {
        let args: Vec<&[u8]> = vec![b"on", b"(+get", b"~x)", b"(+set)"];
        let merged = merge_selector_arguments(&args).unwrap();
        assert_eq!(
            merged,
            vec![b"on".to_vec(), b"(+get ~x)".to_vec(), b"(+set)".to_vec()]
        );
        let args: Vec<&[u8]> = vec![b"(+get", b"~x"];
        assert_eq!(
            merge_selector_arguments(&args).unwrap_err(),
            "Unmatched parenthesis in acl selector starting at '(+get'."
        );
    }
}
