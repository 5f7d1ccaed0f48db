//! The active branch held to `data/branch_cases.json` (the web UI's rule is held to the same).

use serde_json::Value;

use super::*;

fn event(seq: u64, event: ChatEvent) -> Event {
    Event {
        v: 1,
        seq,
        ts: "2026-12-07T00:00:00.000Z".into(),
        session_id: "ses_1".into(),
        kind: event.kind(),
        event,
        client_message_id: None,
        turn_id: None,
    }
}

fn message(seq: u64, revision: Option<Revision>) -> Event {
    event(
        seq,
        ChatEvent::UserMessageSubmitted(UserMessage {
            content: "hi".into(),
            author: "u1".into(),
            revision,
            ..UserMessage::default()
        }),
    )
}

fn ranges(events: &[Event]) -> Vec<[u64; 2]> {
    let mut shown = events.to_vec();
    Branch::keep_active(&mut shown);
    let mut out: Vec<[u64; 2]> = Vec::new();
    for e in shown {
        match out.last_mut() {
            Some(last) if last[1] + 1 == e.seq => last[1] = e.seq,
            _ => out.push([e.seq, e.seq]),
        }
    }
    out
}

fn pairs(value: &Value) -> Vec<[u64; 2]> {
    serde_json::from_value(value.clone()).unwrap()
}

#[test]
fn the_cases_hold() {
    let cases: Value = serde_json::from_str(include_str!("../../data/branch_cases.json")).unwrap();
    for case in cases["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let mut events: Vec<Event> = Vec::new();
        for step in case["steps"].as_array().unwrap() {
            if let Some([from, through]) = step.get("events").map(pairs_one) {
                for seq in from..=through {
                    events.push(event(seq, ChatEvent::system(crate::event::Level::Info, "x")));
                }
            } else if let Some(seq) = step.get("message").and_then(Value::as_u64) {
                events.push(message(seq, None));
            } else if let Some(revise) = step.get("revise") {
                let branch = Branch::latest(&events).unwrap_or_default();
                let kind: RevisionKind = serde_json::from_value(revise["kind"].clone()).unwrap();
                let revision = branch.revise(
                    revise["of"].as_u64().unwrap(),
                    revise["from_seq"].as_u64().unwrap(),
                    kind,
                );
                events.push(message(revise["seq"].as_u64().unwrap(), Some(revision)));
            } else if let Some(select) = step.get("select") {
                let chosen = Branch::select(&events, select["of"].as_u64().unwrap(), "u1");
                match &step["expect"] {
                    Value::Null => assert_eq!(chosen, None, "{name}: {step}"),
                    expect => {
                        let chosen = chosen.unwrap_or_else(|| panic!("{name}: {step}: nothing to select"));
                        assert_eq!(chosen.from_seq, expect["from_seq"].as_u64().unwrap(), "{name}: {step}");
                        assert_eq!(chosen.hidden, pairs(&expect["hidden"]), "{name}: {step}");
                        events.push(event(
                            select["seq"].as_u64().unwrap(),
                            ChatEvent::BranchSelected(chosen),
                        ));
                    }
                }
            } else if let Some(active) = step.get("active") {
                assert_eq!(ranges(&events), pairs(active), "{name}: after {} events", events.len());
            } else {
                panic!("{name}: a step of no known kind: {step}");
            }
        }
    }
}

fn pairs_one(value: &Value) -> [u64; 2] {
    serde_json::from_value(value.clone()).unwrap()
}

#[test]
fn hidden_ranges_merge_and_stay_sorted() {
    let mut branch = Branch::default();
    branch.hide(10, 12);
    branch.hide(1, 3);
    branch.hide(4, 5);
    branch.hide(20, 20);
    branch.hide(11, 19);
    assert_eq!(branch.hidden(), &[[1, 5], [10, 20]]);
    assert!(branch.shows(6) && branch.shows(21) && !branch.shows(15) && !branch.shows(1));
}

#[test]
fn a_revision_never_starts_after_its_message() {
    let revision = Branch::default().revise(5, 9, RevisionKind::Edit);
    assert_eq!(revision.from_seq, 5);
}
