use super::*;
use crate::data::audit::chain::{record_hash, Actor, Entry, Head, Target};
use crate::data::audit::signing::Signer;
use serde_json::json;

const AT: i64 = 1_700_000_000_000;

fn entries(n: u64, at: impl Fn(u64) -> i64) -> Vec<Entry> {
    let mut prev = GENESIS.to_string();
    (1..=n)
        .map(|seq| {
            let e = Entry {
                org_id: "org_1".into(),
                seq,
                at: at(seq),
                actor: Actor { kind: "api_key".into(), id: "key_1".into() },
                action: "gateway.update".into(),
                target: Target { kind: "gateway".into(), id: format!("gw_{seq}") },
                before_hash: None,
                after_hash: Some(record_hash("{}")),
                detail: json!({}),
                prev_hash: prev.clone(),
                hash: String::new(),
            }
            .seal();
            prev = e.hash.clone();
            e
        })
        .collect()
}

/// Signed, chained checkpoints of `entries` at each of `seqs`.
fn checkpoints(signer: &Signer, entries: &[Entry], seqs: &[u64]) -> Vec<Checkpoint> {
    let mut prev = GENESIS.to_string();
    seqs.iter()
        .map(|&seq| {
            let e = &entries[seq as usize - 1];
            let head = Head {
                org_id: e.org_id.clone(),
                seq,
                head_hash: e.hash.clone(),
                at: e.at,
                prev_checkpoint: Some(prev.clone()),
                interval_ms: Some(60_000),
            };
            let mut cp = Checkpoint::sign(head, b"k");
            signer.sign(&mut cp);
            prev = cp.hash();
            cp
        })
        .collect()
}

fn export(entries: &[Entry], cps: &[Checkpoint]) -> String {
    let mut lines: Vec<String> = entries.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    lines.extend(cps.iter().map(|c| serde_json::to_string(c).unwrap()));
    lines.join("\n")
}

#[test]
fn a_signed_export_verifies_with_the_public_key_and_a_partial_check_vouches_for_nothing() {
    let signer = Signer::from_seed([1; 32]);
    let es = entries(4, |s| AT + s as i64);
    let text = export(&es, &checkpoints(&signer, &es, &[2, 4]));
    let keys = [signer.public_key()];
    let r = verify_export(&text, &Options { public_keys: &keys, ..Default::default() }).unwrap();
    assert_eq!((r.signatures, r.last.checkpoint.seq, r.unsigned_tail, r.vouched), (2, 4, 0, true));
    let r = verify_export(&text, &Options::default()).unwrap();
    assert!(!r.vouched, "no key: the structure holds, nothing is vouched for");
    let other = [Signer::from_seed([2; 32]).public_key()];
    let b = verify_export(&text, &Options { public_keys: &other, ..Default::default() }).unwrap_err();
    assert!(b.reason.contains("not a given public key"), "{b}");
}

#[test]
fn a_removed_checkpoint_a_forged_one_and_no_checkpoint_each_break() {
    let signer = Signer::from_seed([1; 32]);
    let keys = [signer.public_key()];
    let opts = Options { public_keys: &keys, ..Default::default() };
    let es = entries(3, |s| AT + s as i64);
    let cps = checkpoints(&signer, &es, &[1, 2, 3]);
    let b = verify_export(&export(&es, &[cps[0].clone(), cps[2].clone()]), &opts).unwrap_err();
    assert_eq!((b.line, b.seq), (5, Some(3)), "{b}");
    assert!(b.reason.contains("does not follow"), "{b}");

    let mut forged = cps.clone();
    forged[2].checkpoint.at += 1;
    let b = verify_export(&export(&es, &forged), &opts).unwrap_err();
    assert!(b.reason.contains("signature does not verify"), "{b}");

    let b = verify_export(&export(&es, &[]), &opts).unwrap_err();
    assert!(b.reason.contains("no checkpoint"), "{b}");
}

#[test]
fn entries_past_the_last_checkpoint_beyond_its_interval_break_within_it_pass() {
    let signer = Signer::from_seed([1; 32]);
    let keys = [signer.public_key()];
    let opts = Options { public_keys: &keys, ..Default::default() };
    // Entry 3 comes 61 s after the checkpoint of seq 2.
    let es = entries(3, |s| if s == 3 { AT + 2 + 61_000 } else { AT + s as i64 });
    let cps = checkpoints(&signer, &es, &[2]);
    let b = verify_export(&export(&es, &cps), &opts).unwrap_err();
    assert_eq!((b.line, b.seq), (3, Some(3)), "{b}");
    let es = entries(3, |s| AT + s as i64 * 1000);
    let r = verify_export(&export(&es, &checkpoints(&signer, &es, &[2])), &opts).unwrap();
    assert_eq!(r.unsigned_tail, 1);
}

#[test]
fn an_anchor_must_be_in_the_export_in_any_of_the_forms_it_is_kept() {
    let signer = Signer::from_seed([1; 32]);
    let keys = [signer.public_key()];
    let es = entries(3, |s| AT + s as i64);
    let cps = checkpoints(&signer, &es, &[2, 3]);
    let json = serde_json::to_string(&cps[1]).unwrap();
    let kept = format!(
        "{json}\n{}\n{}\nsome other line\n\
         2026-01-01T00:00:00Z INFO toolgate::audit: audit checkpoint signed seq=3 checkpoint={json}",
        json!({ "event": "audit.checkpoint", "timestamp": "t", "data": cps[1] }),
        json!({ "level": "INFO", "message": "audit checkpoint signed", "checkpoint": json }),
    );
    let anchors = read_anchors(&kept);
    assert_eq!(anchors, vec![cps[1].clone(); 4]);
    let opts = Options { public_keys: &keys, anchors: &anchors, ..Default::default() };
    assert_eq!(verify_export(&export(&es, &cps), &opts).unwrap().anchors, 4);
    // Cut at its end: the last entry and its checkpoint gone; only the anchor shows it.
    let cut = export(&es[..2], &cps[..1]);
    assert!(verify_export(&cut, &Options { public_keys: &keys, ..Default::default() }).is_ok());
    let b = verify_export(&cut, &opts).unwrap_err();
    assert!(b.reason.contains("does not contain it"), "{b}");
    let other_org: Vec<Checkpoint> = anchors
        .iter()
        .cloned()
        .map(|mut a| {
            a.checkpoint.org_id = "org_2".into();
            a
        })
        .collect();
    let opts = Options { anchors: &other_org, ..Default::default() };
    assert!(verify_export(&export(&es, &cps), &opts).unwrap_err().reason.contains("no anchor"));
}
