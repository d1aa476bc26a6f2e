//! "Serialise this record and put it", written once: every writer of a typed record goes
//! through [`PutRecord`], so a record becomes its stored JSON in one place and a record that
//! will not serialise is one error ([`StoreError::Encode`]) whoever writes it.

use super::{Kind, Store, StoreError};
use async_trait::async_trait;
use serde::Serialize;

/// The JSON a record is stored as.
pub fn encode<T: Serialize + ?Sized>(kind: Kind, id: &str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| StoreError::Encode {
        kind: kind.as_str(),
        id: id.to_string(),
        reason: e.to_string(),
    })
}

/// Typed puts on any [`Store`]: [`Store::put`] and [`Store::put_expiring`] with the record
/// itself instead of its JSON.
#[async_trait]
pub(crate) trait PutRecord: Store {
    /// Serialises `value` and puts it ([`Store::put`]).
    async fn put_record<T: Serialize + Sync + ?Sized>(
        &self,
        kind: Kind,
        partition: &str,
        id: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        self.put(kind, partition, id, encode(kind, id, value)?).await
    }

    /// Serialises `value` and puts it until `expires_at_ms` ([`Store::put_expiring`]).
    async fn put_record_until<T: Serialize + Sync + ?Sized>(
        &self,
        kind: Kind,
        partition: &str,
        id: &str,
        value: &T,
        expires_at_ms: i64,
    ) -> Result<(), StoreError> {
        self.put_expiring(kind, partition, id, encode(kind, id, value)?, expires_at_ms).await
    }
}

impl<S: Store + ?Sized> PutRecord for S {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::store::EmbeddedStore;

    #[derive(Serialize, serde::Deserialize, PartialEq, Debug)]
    struct Note {
        text: String,
    }

    #[tokio::test]
    async fn a_record_is_stored_as_its_json_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store: std::sync::Arc<dyn Store> = std::sync::Arc::new(EmbeddedStore::open(dir.path()).unwrap());
        let note = Note { text: "hello".into() };
        store.put_record(Kind::Meta, "org_1", "n1", &note).await.unwrap();
        let far = crate::base::time::now_ms() + 60_000;
        store.put_record_until(Kind::Meta, "org_1", "n2", &note, far).await.unwrap();
        for id in ["n1", "n2"] {
            let body = store.get(Kind::Meta, id).await.unwrap().expect("stored");
            assert_eq!(serde_json::from_str::<Note>(&body).unwrap(), note);
        }
    }

    #[test]
    fn a_record_that_will_not_serialise_names_itself() {
        // A map with non-string keys has no JSON form.
        let bad: std::collections::HashMap<(u8, u8), u8> = [((1, 2), 3)].into();
        let e = encode(Kind::Meta, "m1", &bad).unwrap_err();
        assert!(matches!(e, StoreError::Encode { kind: "meta", ref id, .. } if id == "m1"), "{e}");
    }
}
