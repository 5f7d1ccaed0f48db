//! A fake OpenAI-compatible provider on loopback, answering `POST /v1/chat/completions` in the
//! provider's documented streaming format (`data:` chunks, usage in the last, `[DONE]`). It
//! keeps every request it got, and answers what its test's `answer` makes of each.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Router, body::Bytes, extract::State, response::IntoResponse, routing::post};
use serde_json::{Value, json};

/// What a fake model says to a request (the requests before it counted in `n`, from 1), and
/// how long it takes first.
pub(crate) type Answer = dyn Fn(&Value, usize) -> (String, Duration) + Send + Sync;

pub(crate) struct FakeModel {
    /// Every request, in order.
    pub(crate) requests: Mutex<Vec<Value>>,
    answer: Box<Answer>,
    /// The usage it reports for every answer: prompt and completion tokens.
    usage: (u64, u64),
}

impl FakeModel {
    /// A fake model answering with `answer`, reporting `usage`, served on loopback: it, and
    /// its base URL (`…/v1` is the OpenAI runtime's base).
    pub(crate) async fn serve(
        usage: (u64, u64),
        answer: impl Fn(&Value, usize) -> (String, Duration) + Send + Sync + 'static,
    ) -> (Arc<Self>, String) {
        let model = Arc::new(Self {
            requests: Mutex::new(Vec::new()),
            answer: Box::new(answer),
            usage,
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(complete))
            .with_state(model.clone());
        (model, spool_tests::serve_on_loopback(app).await)
    }
}

async fn complete(State(model): State<Arc<FakeModel>>, body: Bytes) -> impl IntoResponse {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let (text, delay) = {
        let mut requests = model.requests.lock().unwrap();
        let answered = (model.answer)(&request, requests.len() + 1);
        requests.push(request);
        answered
    };
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    let (prompt, completion) = model.usage;
    let chunks = [
        json!({ "choices": [{ "index": 0, "delta": { "content": text } }] }),
        json!({ "choices": [], "usage": { "prompt_tokens": prompt, "completion_tokens": completion } }),
    ];
    let mut body = String::new();
    for chunk in chunks {
        body.push_str(&format!("data: {chunk}\n\n"));
    }
    body.push_str("data: [DONE]\n\n");
    ([("content-type", "text/event-stream")], body)
}
