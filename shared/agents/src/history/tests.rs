use super::*;
use crate::runtime::ToolCall;

fn user(text: &str) -> Message {
    Message::User { text: text.to_owned() }
}

fn agent(text: &str) -> Message {
    Message::Assistant {
        text: text.to_owned(),
        tool_calls: Vec::new(),
    }
}

#[test]
fn a_history_within_budget_is_left_whole() {
    let messages = [user("hi"), agent("hello")];
    assert_eq!(plan(&messages, &[1, 4], 10, 1_000, 10, 1, false), None);
}

#[test]
fn the_oldest_part_is_cut_before_a_persons_message_and_never_inside_the_turn() {
    // GIVEN four exchanges of 100 tokens each and a turn that starts at seq 40
    let long = "x".repeat(400);
    let messages = [
        user(&long),
        agent(&long),
        user(&long),
        agent(&long),
        user(&long),
        agent(&long),
        user("the turn's question"),
    ];
    let seqs = [1, 5, 10, 15, 20, 25, 40];
    // WHEN the budget holds about half of it
    let cut = plan(&messages, &seqs, 0, 500, 40, 1, false).unwrap();
    // THEN the cut is before a person's message, and what is left fits in half the budget
    assert!(matches!(messages[cut.count], Message::User { .. }));
    let rest: u64 = messages[cut.count..].iter().map(message_tokens).sum();
    assert!(rest <= 250, "{rest}");
    assert_eq!((cut.from_seq, cut.through_seq), (1, seqs[cut.count] - 1));
    // AND forced, everything before the turn is covered, the turn's message is not
    let all = plan(&messages, &seqs, 0, 1_000_000, 40, 1, true).unwrap();
    assert_eq!((all.count, all.through_seq), (6, 39));
}

#[test]
fn a_reply_is_never_parted_from_its_tools_results() {
    let call = ToolCall {
        id: "c1".to_owned(),
        name: "search".to_owned(),
        arguments: serde_json::json!({ "q": "x" }),
    };
    let long = "y".repeat(800);
    let messages = [
        user(&long),
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![call],
        },
        Message::Tool {
            call_id: "c1".to_owned(),
            name: "search".to_owned(),
            content: long.clone(),
        },
        agent(&long),
        user("now"),
    ];
    let cut = plan(&messages, &[1, 2, 3, 4, 9], 0, 300, 9, 1, false).unwrap();
    assert_eq!(
        cut.count, 4,
        "the cut comes before the person's message, not between a call and its result"
    );
}

#[test]
fn a_lone_earlier_summary_is_not_summarised_again() {
    let summary = Message::System {
        text: format!("{} (events 1–9):\nthey met", crate::state::SUMMARY_OPEN),
    };
    assert_eq!(plan(&[summary, user("q")], &[9, 12], 0, 10, 12, 1, true), None);
}

#[test]
fn spools_own_summary_keeps_the_first_lines_and_says_what_it_left_out() {
    let messages: Vec<Message> = (0..200)
        .flat_map(|i| [user(&format!("question {i}\nmore")), agent(&format!("answer {i}"))])
        .collect();
    let short = extract(&messages, 200);
    assert!(short.starts_with("- Person: question 0…"), "{short}");
    assert!(short.contains("more messages, left out of this summary"));
    assert!(short.ends_with("- Agent: answer 199"));
    assert!(short.len() <= 200 * 4 + 80);
    let whole = extract(&messages[..4], 1_000);
    assert_eq!(
        whole,
        "- Person: question 0…\n- Agent: answer 0\n- Person: question 1…\n- Agent: answer 1"
    );
}

#[test]
fn pieces_fit_the_size_they_are_given() {
    let messages: Vec<Message> = (0..10).map(|i| user(&"z".repeat(40 * (i + 1)))).collect();
    let pieces = pieces(&messages, 100);
    assert_eq!(pieces.iter().map(|p| p.len()).sum::<usize>(), 10);
    for piece in &pieces {
        let size: u64 = piece.iter().map(message_tokens).sum();
        assert!(piece.len() == 1 || size <= 100, "{size}");
    }
}

#[test]
fn a_models_budget_is_most_of_its_window_and_unknown_models_get_a_small_one() {
    assert_eq!(model_budget("gpt-4o-mini"), 96_000);
    assert_eq!(model_budget("gpt-4.1-mini"), 1_047_576 / 4 * 3);
    assert_eq!(model_budget("gpt-4"), 6_144);
    assert_eq!(model_budget("claude-sonnet-4-5"), 150_000);
    assert_eq!(model_budget("smollm2-135m"), 24_576);
}
