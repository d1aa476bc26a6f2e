//! Re-sealing every sealed value of the store under a new master key (`toolgate keys rotate`).
//!
//! A rotation must survive being stopped anywhere: each record is rewritten on its own (one
//! durable write), a value already sealed under the new key is left as it is, and until the
//! rotation is over the sealer opens values under either key ([`Sealer::rotating`]). So running
//! it again after a crash rewrites only what is left, and an instance started midway reads
//! every record. The sealed values are found by name (every string member named `sealed_*`),
//! so a record that gains one is rotated without a change here.

use crate::base::secrets::Sealer;
use crate::data::store::{Kind, Store, StoreError, NO_PARTITION};
use serde_json::Value;

/// The kinds of record that hold sealed values, each with the member that names its
/// partition (its organisation; MFA methods are filed in none).
const SEALED_KINDS: &[(Kind, Option<&str>)] = &[
    (Kind::Connection, Some("org_id")),
    (Kind::Webhook, Some("org_id")),
    (Kind::Alert, Some("org_id")),
    (Kind::Mfa, None),
];

#[derive(Debug, thiserror::Error)]
pub enum RekeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{kind} {id}: `{field}` opens under neither the new nor the current master key")]
    Unreadable { kind: &'static str, id: String, field: String },
    #[error("{kind} {id} is not a JSON object")]
    Corrupt { kind: &'static str, id: String },
    /// The test knob `--stop-after` stopped the rotation as a crash would.
    #[error("stopped after {0} records were sealed anew, as asked")]
    Stopped(u64),
}

/// What a rotation did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Resealed {
    /// Records written again, with at least one value sealed anew.
    pub records: u64,
    /// Values sealed anew.
    pub values: u64,
    /// Records whose sealed values were all under the new key already (an earlier run's).
    pub already: u64,
}

/// Seals every sealed value under `sealer`'s key, opening it under either of its keys; one
/// record written at a time, `progress` told of each. `stop_after` stops (as a crash would,
/// leaving the rest) once that many records were written.
pub(crate) async fn reseal_all(
    store: &dyn Store,
    sealer: &Sealer,
    stop_after: Option<u64>,
    mut progress: impl FnMut(Kind, &str),
) -> Result<Resealed, RekeyError> {
    let mut done = Resealed::default();
    for &(kind, partition_field) in SEALED_KINDS {
        for (id, body) in store.load_all(kind).await? {
            let mut record: Value = serde_json::from_str(&body).map_err(|_| corrupt(kind, &id))?;
            let Value::Object(members) = &mut record else { return Err(corrupt(kind, &id)) };
            let values = reseal_members(members, sealer).map_err(|field| RekeyError::Unreadable {
                kind: kind.as_str(),
                id: id.clone(),
                field,
            })?;
            if values == 0 {
                done.already += u64::from(has_sealed(members));
                continue;
            }
            let partition = partition_field
                .and_then(|f| members.get(f))
                .and_then(Value::as_str)
                .unwrap_or(NO_PARTITION)
                .to_string();
            store.put(kind, &partition, &id, record.to_string()).await?;
            done.records += 1;
            done.values += values;
            progress(kind, &id);
            if stop_after == Some(done.records) {
                return Err(RekeyError::Stopped(done.records));
            }
        }
    }
    Ok(done)
}

fn corrupt(kind: Kind, id: &str) -> RekeyError {
    RekeyError::Corrupt { kind: kind.as_str(), id: id.to_string() }
}

fn is_sealed(name: &str, value: &Value) -> bool {
    name.starts_with("sealed_") && value.as_str().is_some_and(|s| !s.is_empty())
}

fn has_sealed(members: &serde_json::Map<String, Value>) -> bool {
    members.iter().any(|(name, value)| is_sealed(name, value))
}

/// Seals anew the record's `sealed_*` members that are under the previous key; how many, or
/// the name of one that opens under neither key.
fn reseal_members(members: &mut serde_json::Map<String, Value>, sealer: &Sealer) -> Result<u64, String> {
    let mut n = 0;
    for (name, value) in members.iter_mut() {
        if !is_sealed(name, value) {
            continue;
        }
        let sealed = value.as_str().unwrap_or_default();
        match sealer.reseal(sealed) {
            Ok(Some(anew)) => {
                *value = Value::String(anew);
                n += 1;
            }
            Ok(None) => {}
            Err(_) => return Err(name.clone()),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::store::EmbeddedStore;
    use serde_json::json;

    #[tokio::test]
    async fn a_stopped_rotation_run_again_reseals_only_what_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let store = EmbeddedStore::open(dir.path()).unwrap();
        let old = Sealer::from_key([1; 32]);
        for i in 0..3 {
            let c = json!({"id": format!("con_{i}"), "org_id": "org_a", "sealed_credentials": old.seal(b"secret")});
            store.put(Kind::Connection, "org_a", &format!("con_{i}"), c.to_string()).await.unwrap();
        }
        let mfa = json!({"user_id": "usr_a", "sealed_secret": old.seal(b"totp"), "backup": []});
        store.put(Kind::Mfa, NO_PARTITION, "usr_a", mfa.to_string()).await.unwrap();
        let rotating = Sealer::rotating([2; 32], [1; 32]);
        let stopped = reseal_all(&store, &rotating, Some(2), |_, _| {}).await;
        assert!(matches!(stopped, Err(RekeyError::Stopped(2))), "{stopped:?}");
        let mut seen = Vec::new();
        let done =
            reseal_all(&store, &rotating, None, |k, id| seen.push(format!("{}/{id}", k.as_str()))).await.unwrap();
        assert_eq!(done, Resealed { records: 2, values: 2, already: 2 }, "{seen:?}");
        let new = Sealer::from_key([2; 32]);
        for (id, body) in store.load_all(Kind::Connection).await.unwrap() {
            let v: Value = serde_json::from_str(&body).unwrap();
            assert_eq!(new.open(v["sealed_credentials"].as_str().unwrap()).unwrap(), b"secret", "{id}");
            assert_eq!(v["org_id"], "org_a", "the other members are kept");
        }
        let v: Value = serde_json::from_str(&store.get(Kind::Mfa, "usr_a").await.unwrap().unwrap()).unwrap();
        assert_eq!(new.open(v["sealed_secret"].as_str().unwrap()).unwrap(), b"totp");
        let other = reseal_all(&store, &Sealer::rotating([3; 32], [4; 32]), None, |_, _| {}).await;
        assert!(matches!(other, Err(RekeyError::Unreadable { .. })), "a value neither key opens stops it: {other:?}");
    }
}
