//! Access control lists, as Redis 7.0 has them: users with passwords
//! (stored as SHA-256 digests), each with selectors saying which commands,
//! keys and channels they may use; the `default` user every connection
//! starts as (`requirepass` is its password); denials recorded in the ACL
//! LOG; users kept in an `aclfile` (ACL SAVE / ACL LOAD).
//!
//! A connection holds its `User`; ACL SETUSER swaps the user's rules in
//! place, so connections authenticated as that user obey the new rules
//! from their next command. Deleting a user (or ACL LOAD replacing it)
//! disconnects its connections, as Redis does.
//!
//! The check (`check`) runs before every command, queued commands again at
//! EXEC, and every command a script calls; the default user's rules allow
//! everything and skip it (`UserRules::unrestricted`).

mod catalog;
mod describe;
pub mod file;
pub mod log;
mod selector;
mod user;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use parking_lot::{Mutex, RwLock};

use crate::commands::{key_specs, CommandSpec};
use crate::resp::Args;
pub use catalog::{Catalog, CATALOG, CATEGORIES};
pub use log::{AclLog, Context};
pub use selector::{has_spaces, Selector};

/// A selector's command rules as ACL GETUSER shows them.
pub fn describe_commands(selector: &Selector) -> String {
    describe::command_rules(selector)
}
pub use user::{merge_selector_arguments, UserRules};

/// Why a rule did not apply (Redis's texts, `ACLSetUserStringError`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleError {
    UnknownCommand,
    Syntax,
    KeysAfterAll,
    ChannelsAfterAll,
    NoSuchPassword,
    BadHash,
    FirstArgOfSubcommand,
}

impl RuleError {
    pub fn text(self) -> &'static str {
        match self {
            RuleError::UnknownCommand => "Unknown command or category name in ACL",
            RuleError::Syntax => "Syntax error",
            RuleError::KeysAfterAll => {
                "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and \
                 does not have any effect. Try 'resetkeys' to start with an empty list of patterns"
            }
            RuleError::ChannelsAfterAll => {
                "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid \
                 and does not have any effect. Try 'resetchannels' to start with an empty list \
                 of channels"
            }
            RuleError::NoSuchPassword => {
                "The password you are trying to remove from the user does not exist"
            }
            RuleError::BadHash => {
                "The password hash must be exactly 64 characters and contain only lowercase \
                 hexadecimal characters"
            }
            RuleError::FirstArgOfSubcommand => {
                "Allowing first-arg of a subcommand is not supported"
            }
        }
    }
}

/// A user. Its rules are swapped whole (ACL SETUSER), so a connection
/// reads a consistent set with one atomic load per command.
pub struct User {
    pub name: Vec<u8>,
    rules: ArcSwap<UserRules>,
}

impl User {
    fn new(name: &[u8], rules: UserRules) -> Arc<User> {
        Arc::new(User {
            name: name.to_vec(),
            rules: ArcSwap::from_pointee(rules),
        })
    }

    pub fn rules(&self) -> arc_swap::Guard<Arc<UserRules>> {
        self.rules.load()
    }

    pub fn name_lossy(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }

    /// A user outside every node's list, with every permission: what a
    /// Raft group's apply runs as when the caller was unrestricted.
    pub fn unrestricted(name: &[u8]) -> Arc<User> {
        User::new(name, UserRules::everything())
    }

    /// A user outside every node's list, rebuilt from its ACL file line
    /// (`user <name> <rules...>`, as `file::render` writes it): a Raft
    /// entry carries its caller's rules this way, so every member checks
    /// a script's calls against the same rules whatever its own users.
    pub fn from_line(line: &str, all_channels: bool) -> Result<Arc<User>, String> {
        let parsed = file::parse("raft entry", line, all_channels)?;
        match <[_; 1]>::try_from(parsed) {
            Ok([(name, rules)]) => Ok(User::new(&name, rules)),
            Err(_) => Err("a Raft entry's caller is not one user line".into()),
        }
    }

    /// A user outside every node's list allowed nothing.
    pub fn allowed_nothing(name: &[u8]) -> Arc<User> {
        User::new(name, UserRules::default())
    }

    /// This user's line for `from_line` (and the ACL file).
    pub fn line(&self) -> String {
        format!("user {} {}", self.name_lossy(), self.rules().describe())
    }
}

/// What a denied call was denied for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    Command,
    /// The argument at this position is a key no selector allows.
    Key(usize),
    /// The argument at this position is a channel no selector allows.
    Channel(usize),
}

impl Denial {
    /// The reply to a denied command (Redis's processCommand).
    pub fn reply(self, command: &str) -> String {
        match self {
            Denial::Command => {
                format!("NOPERM this user has no permissions to run the '{command}' command")
            }
            Denial::Key(_) => "NOPERM this user has no permissions to access one of the keys \
                               used as arguments"
                .to_string(),
            Denial::Channel(_) => "NOPERM this user has no permissions to access one of the \
                                   channels used as arguments"
                .to_string(),
        }
    }

    /// The middle of a script's error (getAclErrorMessage).
    pub fn script_reason(self) -> &'static str {
        match self {
            Denial::Command => "can't run this command or subcommand",
            Denial::Key(_) => {
                "can't access at least one of the keys mentioned in the command \
                               arguments"
            }
            Denial::Channel(_) => "can't publish to the channel mentioned in the command",
        }
    }

    /// EXEC's reason when the rules changed after queuing.
    pub fn exec_reason(self) -> &'static str {
        match self {
            Denial::Command => "no permission to execute the command or subcommand",
            Denial::Key(_) => "no permission to touch the specified keys",
            Denial::Channel(_) => "no permission to access one of the channels used as arguments",
        }
    }

    fn rank(self) -> (u8, usize) {
        match self {
            Denial::Command => (0, 0),
            Denial::Key(at) => (1, at),
            Denial::Channel(at) => (2, at),
        }
    }
}

/// The channels a call names and how: `(position, is_pattern)`, for the
/// commands that publish or subscribe (Redis's channel table;
/// unsubscribing needs no permission).
fn channels_of(name: &str, argc: usize) -> Option<(std::ops::Range<usize>, bool)> {
    match name {
        "subscribe" | "ssubscribe" => Some((1..argc, false)),
        "psubscribe" => Some((1..argc, true)),
        "publish" | "spublish" => Some((1..2.min(argc), false)),
        _ => None,
    }
}

/// Whether `rules` allow the call (`index` into the command table).
pub fn check(
    rules: &UserRules,
    index: usize,
    spec: &CommandSpec,
    args: &Args,
) -> Result<(), (Denial, usize)> {
    if rules.unrestricted {
        return Ok(());
    }
    let id = CATALOG.id_of_call(index, spec, args);
    let mut keys: Option<Vec<(usize, u16)>> = None;
    let mut worst: Option<Denial> = None;
    for selector in &rules.selectors {
        match check_selector(selector, id, spec, args, &mut keys) {
            Ok(()) => return Ok(()),
            Err(denial) => {
                if worst.is_none_or(|w| denial.rank() > w.rank()) {
                    worst = Some(denial);
                }
            }
        }
    }
    Err((worst.unwrap_or(Denial::Command), id))
}

/// Whether some selector of `rules` allows the call and reading every
/// key (`~*`, `%R~*`): what SORT's BY and GET, which read keys named by
/// the data, need (Redis's ACLUserCheckCmdWithUnrestrictedKeyAccess).
pub fn may_read_every_key(
    rules: &UserRules,
    index: usize,
    spec: &CommandSpec,
    args: &Args,
) -> bool {
    if rules.unrestricted {
        return true;
    }
    let id = CATALOG.id_of_call(index, spec, args);
    let mut keys = None;
    rules.selectors.iter().any(|selector| {
        check_selector(selector, id, spec, args, &mut keys).is_ok()
            && selector.allows_every_key(selector::READ)
    })
}

/// The catalog's name of command id `id` (`config|get`).
pub fn command_name(id: usize) -> &'static str {
    &CATALOG.entries[id].name
}

fn check_selector(
    selector: &selector::Selector,
    id: usize,
    spec: &CommandSpec,
    args: &Args,
    keys: &mut Option<Vec<(usize, u16)>>,
) -> Result<(), Denial> {
    if !selector.all_commands && !spec.is(crate::commands::NO_AUTH) && !selector.allows_id(id) {
        let at = if CATALOG.entries[id].parent.is_some() {
            2
        } else {
            1
        };
        let first_ok = args.len() > at
            && selector
                .first_args_of(id)
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(args.get(at)));
        if !first_ok {
            return Err(Denial::Command);
        }
    }
    if !selector.all_keys {
        let keys = keys
            .get_or_insert_with(|| key_specs::keys_with_flags(command_name(id), Some(spec), args));
        for &(at, flags) in keys.iter() {
            if !selector.allows_key(args.get(at), access_of(flags)) {
                return Err(Denial::Key(at));
            }
        }
    }
    if !selector.all_channels {
        if let Some((range, is_pattern)) = channels_of(spec.name, args.len()) {
            for at in range {
                if !selector.allows_channel(args.get(at), is_pattern) {
                    return Err(Denial::Channel(at));
                }
            }
        }
    }
    Ok(())
}

/// The access a key spec's flags ask for: reading for `access`, writing
/// for insert, update and delete.
fn access_of(flags: u16) -> u8 {
    let mut need = 0;
    if flags & key_specs::ACCESS != 0 {
        need |= selector::READ;
    }
    if flags & (key_specs::INSERT | key_specs::UPDATE | key_specs::DELETE) != 0 {
        need |= selector::WRITE;
    }
    need
}

/// The users, the log, and the file they are kept in.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, Arc<User>>>,
    default: Arc<User>,
    pub log: Mutex<AclLog>,
    /// `aclfile`: where ACL SAVE writes and ACL LOAD reads (None: neither
    /// works).
    pub file: Option<PathBuf>,
    /// `acl-pubsub-default allchannels` (Redis 7.0's default is
    /// `resetchannels`: new users get no channel).
    all_channels_default: AtomicBool,
}

impl Acl {
    pub fn new(file: Option<PathBuf>) -> Acl {
        let default = User::new(b"default", UserRules::everything());
        let mut users = BTreeMap::new();
        users.insert(b"default".to_vec(), default.clone());
        Acl {
            users: RwLock::new(users),
            default,
            log: Mutex::new(AclLog::default()),
            file,
            all_channels_default: AtomicBool::new(false),
        }
    }

    pub fn all_channels_default(&self) -> bool {
        self.all_channels_default.load(Ordering::Relaxed)
    }

    /// `acl-pubsub-default`: whether new selectors allow every channel.
    pub fn set_all_channels_default(&self, all: bool) {
        self.all_channels_default.store(all, Ordering::Relaxed);
    }

    pub fn default_user(&self) -> Arc<User> {
        self.default.clone()
    }

    /// Whether a new connection must authenticate: the default user has a
    /// password (or is off).
    pub fn auth_required(&self) -> bool {
        let rules = self.default.rules();
        !(rules.nopass && rules.enabled)
    }

    pub fn user(&self, name: &[u8]) -> Option<Arc<User>> {
        self.users.read().get(name).cloned()
    }

    /// Every user, by name.
    pub fn users(&self) -> Vec<Arc<User>> {
        self.users.read().values().cloned().collect()
    }

    /// The user `name` if `password` opens it and it is on.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        let user = self.user(name)?;
        let rules = user.rules();
        (rules.enabled && rules.password_ok(password)).then(|| user.clone())
    }

    /// ACL SETUSER: applies `args` to a copy of the user's rules (a new
    /// user's if there is none) and installs the result only if every rule
    /// applied. Returns the user and its rules before the change (None for
    /// a new user).
    pub fn set_user(
        &self,
        name: &[u8],
        args: &[&[u8]],
    ) -> Result<(Arc<User>, Option<Arc<UserRules>>), String> {
        let merged = merge_selector_arguments(args)?;
        let mut users = self.users.write();
        let existing = users.get(name).cloned();
        let before = existing.as_ref().map(|u| u.rules.load_full());
        let all_channels = self.all_channels_default.load(Ordering::Relaxed);
        let mut rules = match before.as_deref() {
            Some(rules) => rules.clone(),
            None => UserRules::new_user(all_channels),
        };
        rules.all_channels_default = all_channels;
        for op in &merged {
            rules.apply(op).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(op),
                    e.text()
                )
            })?;
        }
        let user = match existing {
            Some(user) => {
                user.rules.store(Arc::new(rules));
                user
            }
            None => {
                let user = User::new(name, rules);
                users.insert(name.to_vec(), user.clone());
                user
            }
        };
        Ok((user, before))
    }

    /// `requirepass`: the default user's only password, or none (nopass).
    pub fn set_default_password(&self, password: Option<&[u8]>) {
        let mut rules = UserRules::clone(&self.default.rules());
        rules.apply(b"resetpass").expect("valid rule");
        match password {
            Some(password) => {
                let mut op = b">".to_vec();
                op.extend_from_slice(password);
                rules.apply(&op).expect("a password rule is valid");
            }
            None => rules.apply(b"nopass").expect("valid rule"),
        }
        self.default.rules.store(Arc::new(rules));
    }

    /// ACL DELUSER: removes the users named (never `default`) and returns
    /// them, for their connections to be closed.
    pub fn delete_users(&self, names: &[&[u8]]) -> Vec<Arc<User>> {
        let mut users = self.users.write();
        names
            .iter()
            .filter(|&&name| name != b"default")
            .filter_map(|&name| users.remove(name))
            .collect()
    }

    /// Replaces every user by `loaded` (ACL LOAD, startup): the default
    /// user keeps its identity and takes the loaded default's rules (or
    /// Redis's defaults if the file has none). Returns the users replaced,
    /// whose connections are to be closed.
    pub fn replace_all(&self, loaded: Vec<(Vec<u8>, UserRules)>) -> Vec<Arc<User>> {
        let mut fresh = BTreeMap::new();
        let mut default_rules = UserRules::everything();
        for (name, rules) in loaded {
            if name == b"default" {
                default_rules = rules;
            } else {
                fresh.insert(name.clone(), User::new(&name, rules));
            }
        }
        self.default.rules.store(Arc::new(default_rules));
        fresh.insert(b"default".to_vec(), self.default.clone());
        let old = std::mem::replace(&mut *self.users.write(), fresh);
        old.into_values()
            .filter(|u| !Arc::ptr_eq(u, &self.default))
            .collect()
    }
}

/// The ACL as configured at startup: `requirepass` as the default user's
/// password, then the users of the configuration file's `user` lines or
/// of the `aclfile` (not both, as Redis refuses). An error stops startup.
pub fn configured(config: &crate::config::Config) -> Result<Acl, String> {
    let file = config
        .redis_params
        .iter()
        .find(|(name, _)| *name == "aclfile")
        .map(|(_, value)| PathBuf::from(value))
        .filter(|path| !path.as_os_str().is_empty());
    let acl = Acl::new(file.clone());
    let param = |name: &str| {
        config
            .redis_params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value.as_str())
    };
    acl.set_all_channels_default(param("acl-pubsub-default") == Some("allchannels"));
    if let Some(password) = &config.requirepass {
        acl.set_default_password(Some(password.as_bytes()));
    }
    match (&file, config.users.is_empty()) {
        (Some(_), false) => Err(
            "Configuring Redis with users defined in redis.conf and at the \
                                 same setting an ACL file path is invalid. This setup is very \
                                 likely to lead to configuration errors and security holes, \
                                 please define either an ACL file or declare users directly \
                                 in your redis.conf, but not both."
                .to_string(),
        ),
        (Some(path), true) => {
            let all_channels = acl.all_channels_default.load(Ordering::Relaxed);
            let users = file::load(path, all_channels)
                .map_err(|e| format!("Aborting startup because of ACL errors: {e}"))?;
            acl.replace_all(users);
            Ok(acl)
        }
        (None, _) => {
            for words in &config.users {
                let args: Vec<&[u8]> = words[1..].iter().map(|w| w.as_bytes()).collect();
                if has_spaces(words[0].as_bytes()) {
                    return Err(format!(
                        "Error in user declaration '{}': invalid name",
                        words[0]
                    ));
                }
                if words[0] != "default" && acl.user(words[0].as_bytes()).is_some() {
                    return Err(format!(
                        "Error in user declaration '{}': Duplicate user found. A user can only \
                         be defined once in config files",
                        words[0]
                    ));
                }
                // A `user` line describes the user whole, from a new one.
                let mut reset: Vec<&[u8]> = vec![b"reset"];
                reset.extend(args);
                acl.set_user(words[0].as_bytes(), &reset)
                    .map_err(|e| format!("Error in user declaration '{}': {e}", words[0]))?;
            }
            Ok(acl)
        }
    }
}
