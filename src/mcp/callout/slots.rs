//! The bounds on guard calls in flight: per gateway and per organisation
//! (`mcp.guards.concurrency_per_gateway`, `concurrency_per_organization`). A call past either is
//! not queued (a queue behind a slow guard is the slowness this bound keeps from spreading) but
//! follows the guard's `failure`. The counts are this instance's, in one concurrent map each; an
//! entry goes with its last call, so the maps hold the gateways and organisations calling now.

use crate::config::GuardsConfig;
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

/// Guard calls in flight now, by gateway and by organisation.
#[derive(Default)]
pub(crate) struct Slots {
    gateways: DashMap<String, usize>,
    orgs: DashMap<String, usize>,
}

/// One guard call's place under both bounds, given back when it is dropped.
pub(crate) struct Slot<'a> {
    slots: &'a Slots,
    gateway_id: String,
    org_id: String,
}

/// Takes a place in `map` under `key` when fewer than `max` are taken.
fn take(map: &DashMap<String, usize>, key: &str, max: usize) -> bool {
    match map.entry(key.to_owned()) {
        Entry::Occupied(mut e) if *e.get() < max => {
            *e.get_mut() += 1;
            true
        }
        Entry::Occupied(_) => false,
        Entry::Vacant(e) => {
            e.insert(1);
            true
        }
    }
}

fn give_back(map: &DashMap<String, usize>, key: &str) {
    if let Some(mut n) = map.get_mut(key) {
        *n = n.saturating_sub(1);
    }
    map.remove_if(key, |_, n| *n == 0);
}

impl Slots {
    /// A place for one call of `gateway_id`'s guards, if both its gateway and its organisation
    /// have one free.
    pub(crate) fn take(&self, gateway_id: &str, org_id: &str, limits: &GuardsConfig) -> Option<Slot<'_>> {
        if !take(&self.gateways, gateway_id, limits.concurrency_per_gateway) {
            return None;
        }
        if !take(&self.orgs, org_id, limits.concurrency_per_organization) {
            give_back(&self.gateways, gateway_id);
            return None;
        }
        Some(Slot { slots: self, gateway_id: gateway_id.to_owned(), org_id: org_id.to_owned() })
    }

    /// Calls in flight of `gateway_id`'s guards (tests).
    #[cfg(test)]
    pub(crate) fn of_gateway(&self, gateway_id: &str) -> usize {
        self.gateways.get(gateway_id).map_or(0, |n| *n)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        give_back(&self.slots.gateways, &self.gateway_id);
        give_back(&self.slots.orgs, &self.org_id);
    }
}
