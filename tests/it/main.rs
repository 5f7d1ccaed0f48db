//! Spool's integration tests: one binary (`cargo nextest run -p spool-tests`), the emulator
//! parts behind the `emulator` feature, which `make test` turns on after starting the emulator.

/// Instantiates the tests `$test(&harness)` of module `$module` for both backends:
/// `$module::embedded::$test` always, `$module::aws::$test` with the `emulator` feature.
macro_rules! on_both_backends {
    ($module:ident: $($test:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    let harness = spool_tests::EmbeddedHarness::new();
                    $crate::$module::$test(&harness).await;
                }
            )+
        }

        #[cfg(feature = "emulator")]
        mod aws {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $test() {
                    let harness = spool_tests::AwsHarness::new();
                    $crate::$module::$test(&harness).await;
                }
            )+
        }
    };
}

mod agents_http;
mod aggregates;
mod ai_sdk_http;
mod answers_http;
mod attachment_files;
mod attachments_http;
mod branches;
mod capabilities_http;
#[cfg(feature = "emulator")]
mod caps_aws;
mod caps_http;
mod capture_http;
mod chaos;
mod claims_http;
mod cli_agents;
mod cli_models;
mod command_retries_http;
mod commands_http;
mod contract;
mod demo_agent_http;
mod directory;
mod files_http;
mod fork_http;
mod fuzz_http;
mod global_http;
mod half_done_http;
mod handshake;
mod history;
mod isolation_http;
mod lambda_events;
mod llm_http;
#[cfg(feature = "emulator")]
mod log_aws;
mod mcp_client;
mod mcp_http;
mod mcp_races;
mod mcp_servers_http;
mod mcp_store;
mod names_http;
mod openapi_http;
mod paging;
mod processes;
mod queued_http;
mod read_tokens_http;
mod runner_process;
mod runner_turns;
mod runners;
#[cfg(feature = "emulator")]
mod runners_aws;
mod runners_http;
mod sealing;
#[cfg(feature = "emulator")]
mod secrets_aws;
mod sessions;
#[cfg(feature = "emulator")]
mod sessions_aws;
mod sessions_http;
mod settings_http;
mod stream_http;
mod subscriptions_http;
mod support;
mod turns;
mod usage_http;
mod webhooks_http;
mod workspaces;
mod workspaces_http;
