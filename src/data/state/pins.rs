//! A gateway's tool pins (`data::tool_pins`): read from the store when a gateway's catalogue
//! needs them (the MCP runtime keeps them until they change) or an admin lists them, written
//! through it with a change on the feed, so every instance drops its copy.

use super::{decode, State};
use crate::data::changes::Change;
use crate::data::model::ToolPin;
use crate::data::store::{encode, Kind, StoreError, Stored};

impl State {
    /// The pins of one gateway, as the store holds them now. Pins are kept in their
    /// organisation's partition, so the rows of its other gateways come along: only a row that
    /// names this gateway (an id is plain ASCII, written unescaped) is decoded, which keeps a
    /// gateway's first list from paying for every other gateway's pins.
    pub(crate) async fn tool_pins_of(&self, org_id: &str, gateway_id: &str) -> Result<Vec<ToolPin>, StoreError> {
        let rows = self.store.load_partition(Kind::ToolPin, org_id).await?;
        let mut pins = Vec::new();
        for (id, body) in rows.into_iter().filter(|(_, body)| body.contains(gateway_id)) {
            let pin: ToolPin = decode(Kind::ToolPin, &id, &body)?;
            if pin.gateway_id == gateway_id {
                pins.push(pin);
            }
        }
        pins.sort_by(|a, b| (&a.app_id, &a.tool).cmp(&(&b.app_id, &b.tool)));
        Ok(pins)
    }

    /// One pin as the store holds it now.
    pub async fn tool_pin(&self, id: &str) -> Result<Option<ToolPin>, StoreError> {
        self.read(Kind::ToolPin, id).await
    }

    /// Writes pins of one gateway in one durable write, then publishes [`Change::ToolPinsSaved`]
    /// (`decided`: an admin's approval or rejection).
    pub(crate) async fn save_tool_pins(
        &self,
        org_id: &str,
        gateway_id: &str,
        pins: &[ToolPin],
        decided: bool,
    ) -> Result<(), StoreError> {
        if pins.is_empty() {
            return Ok(());
        }
        let mut batch = Vec::with_capacity(pins.len());
        for p in pins {
            batch.push(Stored {
                partition: org_id.to_string(),
                id: p.id.clone(),
                json: encode(Kind::ToolPin, &p.id, p)?,
            });
        }
        self.store.put_many(Kind::ToolPin, batch).await?;
        let _copies = self.copies();
        self.changes.publish(Change::ToolPinsSaved {
            org_id: org_id.to_string(),
            gateway_id: gateway_id.to_string(),
            decided,
        });
        Ok(())
    }

    /// Deletes every pin of one gateway (the gateway is being deleted) in one durable write: a
    /// gateway of 5,000 pinned tools once cost 5,000 writes, each waiting for the disk, while its
    /// `DELETE` waited. How many went.
    pub(crate) async fn delete_tool_pins(&self, org_id: &str, gateway_id: &str) -> Result<usize, StoreError> {
        let ids: Vec<String> = self.tool_pins_of(org_id, gateway_id).await?.into_iter().map(|p| p.id).collect();
        let n = ids.len();
        self.store.delete_many(Kind::ToolPin, ids).await?;
        Ok(n)
    }

    /// Tells the feed that a pin's definition became pending (once it is written).
    pub(crate) fn tool_change_detected(&self, pin: &ToolPin) {
        let Some(pending) = &pin.pending else { return };
        self.changes.publish(Change::ToolChangeDetected {
            org_id: pin.org_id.clone(),
            gateway_id: pin.gateway_id.clone(),
            change_id: pending.id.clone(),
            app_id: pin.app_id.clone(),
            tool: pin.tool.clone(),
            kind: pending.reason.kind().to_string(),
            hash: pending.hash.clone(),
            approved_hash: pin.approved.as_ref().map(|a| a.hash.clone()),
        });
    }
}
