//! # Session records in the metadata table
//!
//! | item | `pk` | `sk` | holds | `gsi1pk` / `gsi1sk` (index `by_activity`) |
//! | --- | --- | --- | --- | --- |
//! | session | `o#{org}#ses#{id}` | `session` | `data` (JSON), `act`, `preview`, `pt` / `ptid` (the pending turn), `by`, `ag`, `tl` (the filters) | `o#{org}#chats#{ws or -}` / `{act:015}#{id}` |
//! | open request | `o#{org}#ses#{id}` | `req#{request id}` | `data` (JSON) | — |
//! | file counter | `o#{org}#ses#{id}` | `cap#att` | `cnt` ([`crate::caps`]) | — |
//!
//! Each session is its own partition, so activity on one chat never contends with another's.
//! Listing a workspace's chats newest first is one `Query` of the `by_activity` index, never a
//! scan of streams; a touch moves the index key forward, conditionally, so activity never goes
//! back. The index is eventually consistent, as DynamoDB's global indexes are: a chat touched a
//! moment ago may take a moment to move up.
//!
//! A list is paged from the index's own key: a cursor's position is the `gsi1sk` of the last
//! chat returned, from which the `ExclusiveStartKey` is rebuilt. The filters are copied out of
//! `data` into attributes of their own (`by`: the creator, `ag`: the agent, `tl`: the title
//! lowercased) and applied by a `FilterExpression`, so DynamoDB returns only what matches.
//! Items written before those attributes (no `tl`) pass that filter and are decided by
//! [`SessionQuery::matches`], which every item passes through anyway.

use async_trait::async_trait;
use aws_sdk_dynamodb::{
    error::SdkError,
    operation::{delete_item::DeleteItemError, update_item::UpdateItemError},
    types::ReturnValue,
};
use spool_chat::{
    listing::{Page, SessionQuery, TurnQuery},
    metadata::Sessions,
    session::{OpenRequest, PendingTurn, RUN_COUNT_TTL_MS, RequestKind, Session, TurnRecord},
};
use spool_log::error::Error;

use crate::{
    errors::ddb,
    items::{Item, n, s},
    keys::{activity_key, chats_key, session_pk},
    metadata::{AwsMetadata, applied, number, string},
};

fn missing(id: &str) -> Error {
    Error::Missing {
        what: format!("session `{id}`"),
    }
}

fn decode(item: &Item) -> Result<Session, Error> {
    let data = string(item, "data", "a session")?;
    let mut session: Session = serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("a session: {e}"),
    })?;
    session.last_active_ms = number(item, "act", "a session")?;
    session.preview = item
        .get("preview")
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default();
    session.branch_seq = item.get("br").and_then(|v| v.as_n().ok()).and_then(|n| n.parse().ok());
    session.pending_turn = item
        .get("pt")
        .and_then(|v| v.as_s().ok())
        .map(|p| serde_json::from_str(p))
        .transpose()
        .map_err(|e| Error::Corrupt {
            what: format!("a session's pending turn: {e}"),
        })?;
    Ok(session)
}

impl AwsMetadata {
    /// An `UpdateItem` of a session's item.
    fn update_session_item(
        &self,
        org: &str,
        id: &str,
    ) -> aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder {
        self.dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, id)))
            .key("sk", s("session"))
    }
}

fn encode(session: &Session) -> Result<String, Error> {
    serde_json::to_string(session).map_err(|e| Error::unavailable("encode a session", e))
}

#[async_trait]
impl Sessions for AwsMetadata {
    async fn create_session(&self, org: &str, session: &Session) -> Result<(), Error> {
        let item = Item::from([
            ("pk".to_owned(), s(session_pk(org, &session.id))),
            ("sk".to_owned(), s("session")),
            ("data".to_owned(), s(encode(session)?)),
            ("act".to_owned(), n(session.last_active_ms)),
            ("preview".to_owned(), s(&session.preview)),
            ("by".to_owned(), s(&session.created_by)),
            ("tl".to_owned(), s(session.title.to_lowercase())),
            ("gsi1pk".to_owned(), s(chats_key(org, session.workspace_id.as_deref()))),
            (
                "gsi1sk".to_owned(),
                s(activity_key(session.last_active_ms, &session.id)),
            ),
        ]);
        let mut item = item;
        if let Some(agent) = &session.agent_id {
            item.insert("ag".to_owned(), s(agent));
        }
        if self
            .put_if(item, "attribute_not_exists(pk)", "PutItem (session)")
            .await?
        {
            Ok(())
        } else {
            Err(Error::Exists {
                what: format!("session `{}`", session.id),
            })
        }
    }

    async fn session(&self, org: &str, id: &str) -> Result<Option<Session>, Error> {
        self.get(session_pk(org, id), "session", "GetItem (session)")
            .await?
            .map(|item| decode(&item))
            .transpose()
    }

    async fn update_session(&self, org: &str, session: &Session) -> Result<(), Error> {
        let update = self
            .update_session_item(org, &session.id)
            .expression_attribute_names("#data", "data")
            .expression_attribute_values(":data", s(encode(session)?))
            .expression_attribute_values(":by", s(&session.created_by))
            .expression_attribute_values(":tl", s(session.title.to_lowercase()))
            .condition_expression("attribute_exists(pk)");
        let update = match &session.agent_id {
            Some(agent) => update
                .update_expression("SET #data = :data, #by = :by, tl = :tl, ag = :ag")
                .expression_attribute_values(":ag", s(agent)),
            None => update.update_expression("SET #data = :data, #by = :by, tl = :tl REMOVE ag"),
        };
        let result = update.expression_attribute_names("#by", "by").send().await;
        if applied(result, "UpdateItem (session)")? {
            Ok(())
        } else {
            Err(missing(&session.id))
        }
    }

    async fn touch_session(&self, org: &str, id: &str, at_ms: i64, preview: &str) -> Result<(), Error> {
        let result = self
            .update_session_item(org, id)
            .update_expression("SET act = :at, preview = :preview, gsi1sk = :key")
            .expression_attribute_values(":at", n(at_ms))
            .expression_attribute_values(":preview", s(preview))
            .expression_attribute_values(":key", s(activity_key(at_ms, id)))
            .condition_expression("attribute_exists(pk) AND act <= :at")
            .send()
            .await;
        // Not applied: the session is gone or has newer activity; nothing to record either way.
        applied(result, "UpdateItem (session activity)").map(drop)
    }

    async fn note_branch(&self, org: &str, id: &str, seq: u64) -> Result<(), Error> {
        let result = self
            .update_session_item(org, id)
            .update_expression("SET br = :seq")
            .expression_attribute_values(":seq", n(seq))
            .condition_expression("attribute_exists(pk) AND (attribute_not_exists(br) OR br < :seq)")
            .send()
            .await;
        // Not applied: the session is gone or a later branch is recorded.
        applied(result, "UpdateItem (session branch)").map(drop)
    }

    async fn delete_session(&self, org: &str, id: &str) -> Result<(), Error> {
        let requests = self.open_requests(org, id).await?;
        for request in requests {
            self.take_request(org, id, &request.id, None).await?;
        }
        let mut attachments = self.query_prefix(session_pk(org, id), "att#").await?;
        // The chat's file counter goes with its files.
        let (pk, sk) = crate::caps::Counter::attachments(org, id, 0).key();
        attachments.push(Item::from([("pk".to_owned(), s(pk)), ("sk".to_owned(), s(sk))]));
        for item in self.turn_items(org, id).await?.iter().chain(&attachments) {
            if let Some(sk) = item.get("sk").cloned() {
                self.dynamodb
                    .delete_item()
                    .table_name(&self.table)
                    .key("pk", s(session_pk(org, id)))
                    .key("sk", sk)
                    .send()
                    .await
                    .map_err(|e| ddb("DeleteItem (turn record or attachment)", e))?;
            }
        }
        let result = self
            .dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, id)))
            .key("sk", s("session"))
            .condition_expression("attribute_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), DeleteItemError::ConditionalCheckFailedException(_)) =>
            {
                Err(missing(id))
            }
            Err(e) => Err(ddb("DeleteItem (session)", e)),
        }
    }

    async fn sessions(&self, org: &str, query: &SessionQuery) -> Result<Page<Session>, Error> {
        let gsi1pk = chats_key(org, query.workspace_id.as_deref());
        // Where the walk resumes: the index key of the last chat a page returned.
        let mut start = query.after.as_ref().map(|after| {
            Item::from([
                ("pk".to_owned(), s(session_pk(org, &after.id))),
                ("sk".to_owned(), s("session")),
                ("gsi1pk".to_owned(), s(&gsi1pk)),
                ("gsi1sk".to_owned(), s(activity_key(after.ms, &after.id))),
            ])
        });
        let mut request = self
            .dynamodb
            .query()
            .table_name(&self.table)
            .index_name("by_activity")
            .key_condition_expression("gsi1pk = :k")
            .expression_attribute_values(":k", s(&gsi1pk))
            .scan_index_forward(false);
        let mut filters = Vec::new();
        if let Some(by) = &query.created_by {
            filters.push("(attribute_not_exists(tl) OR #by = :by)");
            request = request
                .expression_attribute_names("#by", "by")
                .expression_attribute_values(":by", s(by));
        }
        if let Some(agent) = &query.agent_id {
            filters.push("(attribute_not_exists(tl) OR ag = :ag)");
            request = request.expression_attribute_values(":ag", s(agent));
        }
        if let Some(needle) = query.needle() {
            filters.push("(attribute_not_exists(tl) OR contains(tl, :q))");
            request = request.expression_attribute_values(":q", s(needle));
        }
        if !filters.is_empty() {
            request = request.filter_expression(filters.join(" AND "));
        }
        // One more than the page, to know whether another follows; the next cursor is the last
        // chat kept, never a DynamoDB page's `LastEvaluatedKey` (which may lie past it).
        let want = query.limit.saturating_add(1);
        let mut matched = Vec::new();
        while matched.len() < want {
            let page = request
                .clone()
                .limit(i32::try_from(want - matched.len()).unwrap_or(i32::MAX).clamp(25, 1000))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb("Query (sessions by activity)", e))?;
            for item in page.items.unwrap_or_default() {
                let session = decode(&item)?;
                if query.matches(&session) && matched.len() < want {
                    matched.push(session);
                }
            }
            match page.last_evaluated_key {
                Some(key) => start = Some(key),
                None => break,
            }
        }
        Ok(Page::of(matched, query.limit, SessionQuery::key))
    }

    async fn claim_turn(&self, org: &str, id: &str, turn: &PendingTurn) -> Result<Result<(), PendingTurn>, Error> {
        let claim = serde_json::to_string(turn).map_err(|e| Error::unavailable("encode a pending turn", e))?;
        let result = self
            .update_session_item(org, id)
            .update_expression("SET pt = :pt, ptid = :ptid")
            .expression_attribute_values(":pt", s(claim))
            .expression_attribute_values(":ptid", s(&turn.turn_id))
            .condition_expression("attribute_exists(pk) AND attribute_not_exists(ptid)")
            .send()
            .await;
        if applied(result, "UpdateItem (claim a turn)")? {
            return Ok(Ok(()));
        }
        match self.session(org, id).await? {
            None => Err(missing(id)),
            // Our own claim: the SDK retried a write that had applied (its answer was lost).
            Some(Session {
                pending_turn: Some(holder),
                ..
            }) if holder.turn_id == turn.turn_id => Ok(Ok(())),
            Some(Session {
                pending_turn: Some(holder),
                ..
            }) => Ok(Err(holder)),
            // Released meanwhile: a retry will claim it.
            Some(_) => Err(Error::Contention {
                path: Session::stream(org, id)?,
            }),
        }
    }

    async fn release_turn(&self, org: &str, id: &str, turn_id: &str) -> Result<bool, Error> {
        let result = self
            .update_session_item(org, id)
            .update_expression("REMOVE pt, ptid")
            .expression_attribute_values(":ptid", s(turn_id))
            .condition_expression("ptid = :ptid")
            .send()
            .await;
        applied(result, "UpdateItem (release a turn)")
    }

    async fn count_run(&self, org: &str, session_id: &str, step: &str, now_ms: i64) -> Result<u32, Error> {
        let out = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, session_id)))
            .key("sk", s(format!("run#{step}")))
            .update_expression("ADD runs :one SET #ttl = :ttl")
            .expression_attribute_names("#ttl", "ttl")
            .expression_attribute_values(":one", n(1))
            .expression_attribute_values(":ttl", n(now_ms.saturating_add(RUN_COUNT_TTL_MS).div_euclid(1000)))
            .return_values(aws_sdk_dynamodb::types::ReturnValue::UpdatedNew)
            .send()
            .await
            .map_err(|e| ddb("UpdateItem (count a turn's run)", e))?;
        out.attributes()
            .and_then(|a| a.get("runs"))
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| Error::unavailable("count a turn's run", "DynamoDB returned no count"))
    }

    async fn open_request(&self, org: &str, session_id: &str, request: &OpenRequest) -> Result<(), Error> {
        let data = serde_json::to_string(request).map_err(|e| Error::unavailable("encode a request", e))?;
        let item = Item::from([
            ("pk".to_owned(), s(session_pk(org, session_id))),
            ("sk".to_owned(), s(format!("req#{}", request.id))),
            ("data".to_owned(), s(data)),
            ("kind".to_owned(), s(request.kind.as_str())),
        ]);
        if self
            .put_if(item, "attribute_not_exists(pk)", "PutItem (open request)")
            .await?
        {
            Ok(())
        } else {
            Err(Error::Exists {
                what: format!("request `{}`", request.id),
            })
        }
    }

    async fn take_request(
        &self,
        org: &str,
        session_id: &str,
        request_id: &str,
        kind: Option<RequestKind>,
    ) -> Result<Option<OpenRequest>, Error> {
        let mut delete = self
            .dynamodb
            .delete_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, session_id)))
            .key("sk", s(format!("req#{request_id}")));
        delete = match kind {
            Some(kind) => delete
                .condition_expression("attribute_exists(pk) AND #kind = :kind")
                .expression_attribute_names("#kind", "kind")
                .expression_attribute_values(":kind", s(kind.as_str())),
            None => delete.condition_expression("attribute_exists(pk)"),
        };
        let result = delete.return_values(ReturnValue::AllOld).send().await;
        match result {
            Ok(out) => out.attributes.map(|item| decode_request_item(&item)).transpose(),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), DeleteItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(None)
            }
            Err(e) => Err(ddb("DeleteItem (open request)", e)),
        }
    }

    async fn record_turn(&self, org: &str, session_id: &str, turn: &TurnRecord) -> Result<(), Error> {
        let data = serde_json::to_string(turn).map_err(|e| Error::unavailable("encode a turn record", e))?;
        let mut update = self
            .dynamodb
            .update_item()
            .table_name(&self.table)
            .key("pk", s(session_pk(org, session_id)))
            .key("sk", s(format!("turn#{}", turn.turn_id)))
            .condition_expression("attribute_not_exists(pk) OR #rank <= :rank")
            .expression_attribute_names("#rank", "rank")
            .expression_attribute_names("#data", "data")
            .expression_attribute_values(":rank", n(turn.status.rank()))
            .expression_attribute_values(":data", s(data))
            .expression_attribute_values(":created", n(turn.created_ms));
        // DynamoDB deletes a finished record some time after its `ttl` (seconds); reads hide it
        // from then on.
        update = match turn.expires_ms {
            Some(ms) => update
                .update_expression(
                    "SET #data = :data, #rank = :rank, created = if_not_exists(created, :created), #ttl = :ttl",
                )
                .expression_attribute_names("#ttl", "ttl")
                .expression_attribute_values(":ttl", n(ms.div_euclid(1000))),
            None => {
                update.update_expression("SET #data = :data, #rank = :rank, created = if_not_exists(created, :created)")
            }
        };
        match update.send().await {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(())
            }
            Err(e) => Err(ddb("UpdateItem (turn record)", e)),
        }
    }

    async fn turns(&self, org: &str, query: &TurnQuery) -> Result<Page<TurnRecord>, Error> {
        // A chat's turn records are one partition, kept for days: read whole, then paged.
        let mut turns = Vec::new();
        for item in self.turn_items(org, &query.session_id).await? {
            let mut turn: TurnRecord =
                serde_json::from_str(&string(&item, "data", "a turn record")?).map_err(|e| Error::Corrupt {
                    what: format!("a turn record: {e}"),
                })?;
            turn.created_ms = number(&item, "created", "a turn record")?;
            turns.push(turn);
        }
        turns.sort_by(|a, b| (b.created_ms, &b.turn_id).cmp(&(a.created_ms, &a.turn_id)));
        Ok(Page::slice(
            turns,
            query.after.as_ref(),
            query.limit,
            TurnQuery::key,
            |t| query.matches(t),
        ))
    }

    async fn open_requests(&self, org: &str, session_id: &str) -> Result<Vec<OpenRequest>, Error> {
        let out = self
            .dynamodb
            .query()
            .table_name(&self.table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :req)")
            .expression_attribute_values(":pk", s(session_pk(org, session_id)))
            .expression_attribute_values(":req", s("req#"))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| ddb("Query (open requests)", e))?;
        let mut requests: Vec<OpenRequest> = out
            .items
            .unwrap_or_default()
            .iter()
            .map(decode_request_item)
            .collect::<Result<_, _>>()?;
        requests.sort_by_key(|r| r.opened_seq);
        Ok(requests)
    }
}

impl AwsMetadata {
    /// A session's turn records, as items (one consistent query of its partition).
    async fn turn_items(&self, org: &str, session_id: &str) -> Result<Vec<Item>, Error> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .dynamodb
                .query()
                .table_name(&self.table)
                .key_condition_expression("pk = :pk AND begins_with(sk, :turn)")
                .expression_attribute_values(":pk", s(session_pk(org, session_id)))
                .expression_attribute_values(":turn", s("turn#"))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| ddb("Query (turn records)", e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key;
            if start.is_none() {
                return Ok(items);
            }
        }
    }
}

fn decode_request_item(item: &Item) -> Result<OpenRequest, Error> {
    let data = string(item, "data", "an open request")?;
    serde_json::from_str(&data).map_err(|e| Error::Corrupt {
        what: format!("an open request: {e}"),
    })
}
