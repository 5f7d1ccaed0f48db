//! # Model prices: the checked-in table
//!
//! `shared/chat/data/prices.json` (model name or prefix → USD per million input, cached input
//! and output tokens; its `comment` says when and from where it was written), read once. A
//! model matches its exact name or the longest listed name it starts with; a model it does not
//! list has no price, and estimates name it as unpriced instead of guessing.

use std::sync::OnceLock;

use serde::Deserialize;

use super::Tokens;

/// The table, as checked in.
const PRICES_JSON: &str = include_str!("../../data/prices.json");

/// One model's prices, in USD per million tokens.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Price {
    /// The model's name, or a prefix of names.
    pub model: String,
    /// Per million input tokens not read from a cache.
    pub input: f64,
    /// Per million input tokens read from the provider's cache.
    pub cached_input: f64,
    /// Per million output tokens.
    pub output: f64,
}

impl Price {
    /// What `tokens` cost, in USD.
    pub fn cost(&self, tokens: &Tokens) -> f64 {
        let cached = tokens.cached_input.min(tokens.input);
        let fresh = tokens.input - cached;
        let sum = (fresh as f64).mul_add(
            self.input,
            (cached as f64).mul_add(self.cached_input, tokens.output as f64 * self.output),
        );
        sum / 1e6
    }
}

#[derive(Deserialize)]
struct Table {
    models: Vec<Price>,
}

fn table() -> &'static [Price] {
    static TABLE: OnceLock<Vec<Price>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // A test holds the file to this shape; a table that does not parse prices nothing.
        serde_json::from_str::<Table>(PRICES_JSON).map_or_else(
            |e| {
                tracing::error!(error = %e, "shared/chat/data/prices.json does not parse; no model is priced");
                Vec::new()
            },
            |t| t.models,
        )
    })
}

/// The price of `model`: its own, or the longest listed prefix's.
pub fn price_of(model: &str) -> Option<&'static Price> {
    table()
        .iter()
        .filter(|p| model.starts_with(&p.model))
        .max_by_key(|p| p.model.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_and_prices_by_the_longest_prefix() {
        let table: Table = serde_json::from_str(PRICES_JSON).unwrap();
        assert!(table.models.len() >= 10);
        let value: serde_json::Value = serde_json::from_str(PRICES_JSON).unwrap();
        assert!(value["comment"].as_str().unwrap().contains("2026-12-07"));
        assert_eq!(price_of("gpt-4o-mini-2024-07-18").unwrap().model, "gpt-4o-mini");
        assert_eq!(price_of("gpt-4o").unwrap().model, "gpt-4o");
        assert_eq!(price_of("claude-sonnet-4-20250514").unwrap().model, "claude-sonnet-4");
        assert!(price_of("llama3").is_none());
        let tokens = Tokens {
            input: 1_000_000,
            cached_input: 400_000,
            output: 100_000,
        };
        // 0.6 M fresh at 0.15, 0.4 M cached at 0.075, 0.1 M out at 0.6.
        let cost = price_of("gpt-4o-mini").unwrap().cost(&tokens);
        assert!((cost - (0.09 + 0.03 + 0.06)).abs() < 1e-9, "{cost}");
    }
}
