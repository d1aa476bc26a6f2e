//! What a gateway's rules decided for one caller and one tool, remembered (`RuleSet::decide_call`).

use super::{CallFacts, Cause};
use crate::base::fast_map::FastMap;
use std::net::IpAddr;
use std::sync::Arc;
use toolgate_filters::{CredentialKind, Principal, Role, ScopeSet};

/// Most decisions a rule set remembers; past it the memo starts again empty.
const MEMO_MAX: usize = 4096;

/// What the rules decided for one caller and one tool, remembered: a rule that does not read the
/// call's arguments decides from the caller, its address and the tool alone, so the same caller
/// calling the same tool gets the same answer without running the interpreter again (whose
/// scope and variable maps cost about 5 us per call, the whole budget of the feature several
/// times over). The memo lives in the compiled set, so a changed rule starts a new one; a
/// caller whose role, scopes or address changed is another key. Keyed by a hash drawn from
/// the process's randomness, each entry keeps its full key and is compared field by field, so
/// a collision can only cost a miss, never borrow another caller's answer.
#[derive(Default)]
pub(super) struct Memo {
    pub(super) hasher: ahash::RandomState,
    entries: FastMap<u64, Vec<(MemoKey, Outcome)>>,
}

/// Everything a decision without `args` (and without a token's claims) depends on.
#[derive(PartialEq, Eq)]
struct MemoKey {
    credential: &'static str,
    service_account: String,
    key_id: String,
    user_id: String,
    org_id: String,
    role: Role,
    scopes: ScopeSet,
    ip: IpAddr,
    tool: String,
    app: String,
    function: String,
}

/// `None` allows; otherwise the deny rule's name and why it denied.
pub(super) type Outcome = Option<(Arc<str>, Cause)>;

/// A `MemoKey` borrowed from the call, hashed and compared without copying anything.
#[derive(Hash)]
pub(super) struct MemoProbe<'a> {
    credential: &'static str,
    service_account: &'a str,
    key_id: &'a str,
    user_id: &'a str,
    org_id: &'a str,
    role: Role,
    scopes: ScopeSet,
    ip: IpAddr,
    tool: &'a str,
    app: &'a str,
    function: &'a str,
}

impl<'a> MemoProbe<'a> {
    pub(super) fn new(p: &'a Principal, ip: IpAddr, t: CallFacts<'a>) -> MemoProbe<'a> {
        let service_account = match &p.credential {
            CredentialKind::ServiceAccount { account_id } => account_id.as_str(),
            _ => "",
        };
        MemoProbe {
            credential: p.credential.as_str(),
            service_account,
            key_id: &p.key_id,
            user_id: &p.user_id,
            org_id: &p.org_id,
            role: p.role,
            scopes: p.scopes,
            ip,
            tool: t.tool,
            app: t.app,
            function: t.function,
        }
    }

    fn is(&self, k: &MemoKey) -> bool {
        self.credential == k.credential
            && self.service_account == k.service_account
            && self.key_id == k.key_id
            && self.user_id == k.user_id
            && self.org_id == k.org_id
            && self.role == k.role
            && self.scopes == k.scopes
            && self.ip == k.ip
            && self.tool == k.tool
            && self.app == k.app
            && self.function == k.function
    }

    fn owned(&self) -> MemoKey {
        MemoKey {
            credential: self.credential,
            service_account: self.service_account.to_string(),
            key_id: self.key_id.to_string(),
            user_id: self.user_id.to_string(),
            org_id: self.org_id.to_string(),
            role: self.role,
            scopes: self.scopes,
            ip: self.ip,
            tool: self.tool.to_string(),
            app: self.app.to_string(),
            function: self.function.to_string(),
        }
    }
}

impl Memo {
    pub(super) fn get(&self, hash: u64, probe: &MemoProbe<'_>) -> Option<Outcome> {
        let bucket = self.entries.get(&hash)?;
        bucket.iter().find(|(k, _)| probe.is(k)).map(|(_, o)| o.clone())
    }

    pub(super) fn put(&self, hash: u64, probe: &MemoProbe<'_>, outcome: Outcome) {
        if self.entries.len() >= MEMO_MAX {
            self.entries.clear();
        }
        let mut bucket = self.entries.entry(hash).or_default();
        if !bucket.iter().any(|(k, _)| probe.is(k)) {
            bucket.push((probe.owned(), outcome));
        }
    }

    pub(super) fn len(&self) -> usize {
        self.entries.iter().map(|b| b.len()).sum()
    }
}
