//! # Usage reports: the ledger's rows added up, with estimated costs
//!
//! What `GET /v1/sessions/{id}/usage` and `GET /v1/workspaces/{id}/usage` answer, built here
//! once from the ledger's rows ([`super::UsageRow`]): the totals, and the same by agent, by
//! model and (for a workspace) by chat. A row's `estimated_cost_usd` adds up the tokens of
//! priced models ([`super::prices`]); it is `null` when none of its tokens are priced, and the
//! report names the models it could not price (`unpriced_models`), so an estimate never hides
//! what it leaves out.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Tokens, UsageRow, prices::price_of};

/// Tokens, and what they cost.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageTotals {
    /// Tokens read, the cached ones included.
    pub input_tokens: u64,
    /// Of those, tokens read from the provider's cache.
    pub cached_input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// The estimated cost in USD of the tokens of priced models; `null` when none are priced.
    pub estimated_cost_usd: Option<f64>,
}

impl UsageTotals {
    fn add(&mut self, tokens: &Tokens, model: Option<&str>) {
        self.input_tokens = self.input_tokens.saturating_add(tokens.input);
        self.cached_input_tokens = self.cached_input_tokens.saturating_add(tokens.cached_input);
        self.output_tokens = self.output_tokens.saturating_add(tokens.output);
        if let Some(price) = model.and_then(price_of) {
            let cost = self.estimated_cost_usd.unwrap_or(0.0) + price.cost(tokens);
            self.estimated_cost_usd = Some(cost);
        }
    }

    /// The cost rounded to a millionth of a dollar, as shown.
    fn rounded(mut self) -> Self {
        self.estimated_cost_usd = self.estimated_cost_usd.map(|c| (c * 1e6).round() / 1e6);
        self
    }
}

/// An agent's share.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentUsage {
    /// The agent; `null` for Spool's own answers in a chat without an agent.
    pub agent_id: Option<String>,
    /// Its name, as last recorded.
    pub agent_name: String,
    /// Its tokens and their cost.
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// A model's share.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelUsage {
    /// The model; `null` when the runtime named none.
    pub model: Option<String>,
    /// Whether the price table prices it.
    pub priced: bool,
    /// Its tokens and their cost.
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// A chat's share of a workspace's.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChatUsage {
    /// The chat.
    pub chat_id: String,
    /// Its tokens and their cost.
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// Tokens added up, by agent, model and (for a workspace) chat.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Everything.
    pub totals: UsageTotals,
    /// By agent, most tokens first.
    pub by_agent: Vec<AgentUsage>,
    /// By model, most tokens first.
    pub by_model: Vec<ModelUsage>,
    /// By chat, most tokens first.
    pub by_chat: Vec<ChatUsage>,
    /// The models the price table does not price (their tokens have no cost estimate).
    pub unpriced_models: Vec<String>,
}

impl Report {
    /// The report of `rows`.
    pub fn of(rows: &[UsageRow]) -> Self {
        let mut totals = UsageTotals::default();
        let mut agents: BTreeMap<Option<&str>, (String, UsageTotals)> = BTreeMap::new();
        let mut models: BTreeMap<Option<&str>, UsageTotals> = BTreeMap::new();
        let mut chats: BTreeMap<&str, UsageTotals> = BTreeMap::new();
        for row in rows {
            let model = row.model.as_deref();
            totals.add(&row.tokens, model);
            let agent = agents
                .entry(row.agent_id.as_deref())
                .or_insert_with(|| (row.agent_name.clone(), UsageTotals::default()));
            agent.1.add(&row.tokens, model);
            models.entry(model).or_default().add(&row.tokens, model);
            chats.entry(&row.chat_id).or_default().add(&row.tokens, model);
        }
        let most = |t: &UsageTotals| std::cmp::Reverse(t.input_tokens.saturating_add(t.output_tokens));
        let mut by_agent: Vec<AgentUsage> = agents
            .into_iter()
            .map(|(id, (name, totals))| AgentUsage {
                agent_id: id.map(str::to_owned),
                agent_name: name,
                totals: totals.rounded(),
            })
            .collect();
        by_agent.sort_by_key(|a| most(&a.totals));
        let mut by_model: Vec<ModelUsage> = models
            .into_iter()
            .map(|(model, totals)| ModelUsage {
                priced: model.and_then(price_of).is_some(),
                model: model.map(str::to_owned),
                totals: totals.rounded(),
            })
            .collect();
        by_model.sort_by_key(|m| most(&m.totals));
        let mut by_chat: Vec<ChatUsage> = chats
            .into_iter()
            .map(|(chat, totals)| ChatUsage {
                chat_id: chat.to_owned(),
                totals: totals.rounded(),
            })
            .collect();
        by_chat.sort_by_key(|c| most(&c.totals));
        let unpriced_models = by_model
            .iter()
            .filter(|m| !m.priced)
            .map(|m| m.model.clone().unwrap_or_else(|| "(unnamed)".to_owned()))
            .collect();
        Self {
            totals: totals.rounded(),
            by_agent,
            by_model,
            by_chat,
            unpriced_models,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(chat: &str, agent: &str, model: Option<&str>, input: u64, cached: u64, output: u64) -> UsageRow {
        UsageRow {
            chat_id: chat.to_owned(),
            agent_id: Some(agent.to_owned()),
            agent_name: agent.to_uppercase(),
            model: model.map(str::to_owned),
            tokens: Tokens {
                input,
                cached_input: cached,
                output,
            },
        }
    }

    #[test]
    fn rows_add_up_by_agent_model_and_chat_with_costs_of_priced_models_only() {
        let report = Report::of(&[
            row("c1", "a", Some("gpt-4o-mini"), 1_000_000, 0, 0),
            row("c1", "b", Some("local-llama"), 10, 0, 5),
            row("c2", "a", Some("gpt-4o-mini"), 0, 0, 1_000_000),
        ]);
        assert_eq!(report.totals.input_tokens, 1_000_010);
        assert_eq!(report.totals.output_tokens, 1_000_005);
        assert_eq!(report.totals.estimated_cost_usd, Some(0.75));
        assert_eq!(report.unpriced_models, vec!["local-llama".to_owned()]);
        let a = &report.by_agent[0];
        assert_eq!((a.agent_id.as_deref(), a.agent_name.as_str()), (Some("a"), "A"));
        assert_eq!(a.totals.estimated_cost_usd, Some(0.75));
        let b = &report.by_agent[1];
        assert_eq!(b.totals.estimated_cost_usd, None);
        assert_eq!(
            report.by_chat.iter().map(|c| c.totals.input_tokens).sum::<u64>(),
            1_000_010
        );
        assert!(
            report
                .by_model
                .iter()
                .any(|m| !m.priced && m.totals.estimated_cost_usd.is_none())
        );
    }
}
