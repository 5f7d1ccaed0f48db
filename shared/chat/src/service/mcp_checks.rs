//! # What an MCP server must be to be kept
//!
//! The rules [`super::McpServerService`] holds every server to, made and changed alike: a name
//! that can prefix its tools' names (`^[a-z0-9][a-z0-9_-]{0,31}$` without `__`: tools are
//! `{server}__{tool}` and providers allow `^[a-zA-Z0-9_-]{1,64}$`), the fields of its transport
//! and no others, a URL by the webhooks' address rules, header and variable names that are
//! names, and bounded counts and lengths. Values are secrets: a refusal names the header or
//! variable, never its value.

use spool_log::{
    error::Error,
    subscription::{
        refusal::Refusal,
        spec::{UrlPolicy, check_webhook_url},
    },
};

use crate::mcp::{McpServer, McpTransport, TOOL_SEPARATOR};

/// The longest server name.
pub(super) const MAX_NAME_CHARS: usize = 32;
/// Most headers of one server.
pub(super) const MAX_HEADERS: usize = 32;
/// Most environment variables of one server.
pub(super) const MAX_ENV: usize = 64;
/// Most arguments of one program.
pub(super) const MAX_ARGS: usize = 64;
/// Most tool policies of one server.
pub(super) const MAX_TOOL_POLICIES: usize = 256;
/// The longest header or variable name, in bytes.
pub(super) const MAX_KEY_BYTES: usize = 128;
/// The longest header or variable value, in bytes.
pub(super) const MAX_VALUE_BYTES: usize = 8 * 1024;
/// The longest command or argument, in bytes.
pub(super) const MAX_ARG_BYTES: usize = 4 * 1024;
/// The longest tool name, in bytes.
pub(super) const MAX_TOOL_NAME_BYTES: usize = 128;

/// Headers a server may not be given: HTTP or the MCP transport sets them (and any `Mcp-*`,
/// the protocol's own).
const RESERVED_HEADERS: [&str; 9] = [
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "accept",
    "last-event-id",
    "mcp-session-id",
    "mcp-protocol-version",
];

/// Variables a program may not be given: they would undo its confinement (where it runs,
/// which program or libraries it loads) or pose as Spool's own (any `SPOOL_*`), as would any
/// `LD_*` or `DYLD_*`. Compared without case.
const RESERVED_ENV: [&str; 20] = [
    "PATH",
    "HOME",
    "TMPDIR",
    "TMP",
    "TEMP",
    "SHELL",
    "IFS",
    "ENV",
    "BASH_ENV",
    "NODE_OPTIONS",
    "NODE_PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSTARTUP",
    "PYTHONUSERBASE",
    "PERL5LIB",
    "PERL5OPT",
    "RUBYLIB",
    "RUBYOPT",
    "GIT_CONFIG_GLOBAL",
];

/// Prefixes of variables a program may not be given (see [`RESERVED_ENV`]).
const RESERVED_ENV_PREFIXES: [&str; 3] = ["LD_", "DYLD_", "SPOOL_"];

pub(super) fn bad_request(message: impl Into<String>) -> Error {
    Refusal::new(400, "bad_request", message).into()
}

/// Refuses a name that cannot prefix tool names.
pub(super) fn check_name(name: &str) -> Result<(), Error> {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
    if !first_ok || !rest_ok || name.len() > MAX_NAME_CHARS {
        return Err(bad_request(format!(
            "`name` must be 1 to {MAX_NAME_CHARS} of a-z, 0-9, `_` and `-`, starting with a letter or digit \
             (it prefixes the server's tools' names)"
        )));
    }
    if name.contains(TOOL_SEPARATOR) {
        return Err(bad_request(format!(
            "`name` must not contain `{TOOL_SEPARATOR}`: it separates a server's name from its tool's"
        )));
    }
    Ok(())
}

/// An HTTP header name: a token (RFC 9110, section 5.6.2).
fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_KEY_BYTES
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// An environment variable's name: `^[A-Za-z_][A-Za-z0-9_]*$`.
fn is_env_name(name: &str) -> bool {
    name.len() <= MAX_KEY_BYTES
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Refuses a header value that is not one (it is never repeated in the refusal).
pub(super) fn check_header_value(name: &str, value: &str) -> Result<(), Error> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(bad_request(format!(
            "the value of header `{name}` is longer than {MAX_VALUE_BYTES} bytes"
        )));
    }
    if value.bytes().any(|b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err(bad_request(format!(
            "the value of header `{name}` holds a control character"
        )));
    }
    Ok(())
}

/// Refuses an environment value that cannot be one (it is never repeated in the refusal).
pub(super) fn check_env_value(name: &str, value: &str) -> Result<(), Error> {
    if value.len() > MAX_VALUE_BYTES {
        return Err(bad_request(format!(
            "the value of variable `{name}` is longer than {MAX_VALUE_BYTES} bytes"
        )));
    }
    if value.contains('\0') {
        return Err(bad_request(format!("the value of variable `{name}` holds a NUL")));
    }
    Ok(())
}

/// Refuses header names that are not names or that the transport sets.
pub(super) fn check_header_name(name: &str) -> Result<(), Error> {
    if !is_header_name(name) {
        return Err(bad_request(format!(
            "`{}` is not a header name",
            name.chars().take(MAX_KEY_BYTES).collect::<String>().escape_debug()
        )));
    }
    let lower = name.to_ascii_lowercase();
    if RESERVED_HEADERS.contains(&lower.as_str()) || lower.starts_with("mcp-") {
        return Err(bad_request(format!(
            "header `{name}` is reserved: HTTP or the MCP transport sets it, so it cannot be given"
        )));
    }
    Ok(())
}

/// Refuses names that are not environment variables' names.
pub(super) fn check_env_name(name: &str) -> Result<(), Error> {
    if !is_env_name(name) {
        return Err(bad_request(format!(
            "`{}` is not an environment variable's name (`^[A-Za-z_][A-Za-z0-9_]*$`, at most {MAX_KEY_BYTES})",
            name.chars().take(MAX_KEY_BYTES).collect::<String>().escape_debug()
        )));
    }
    let upper = name.to_ascii_uppercase();
    if RESERVED_ENV.contains(&upper.as_str()) || RESERVED_ENV_PREFIXES.iter().any(|p| upper.starts_with(p)) {
        return Err(bad_request(format!(
            "environment variable `{name}` is reserved: it would change where or how the program runs \
             (PATH, HOME, TMPDIR, loaders' and interpreters' paths and options, LD_*, DYLD_*) or pose as \
             Spool's (SPOOL_*), so it cannot be given"
        )));
    }
    Ok(())
}

/// Refuses a server that breaks a rule; `urls` judges its URL.
pub(super) fn check_server(server: &McpServer, urls: UrlPolicy) -> Result<(), Error> {
    check_name(&server.name)?;
    match server.transport {
        McpTransport::Http => {
            let url = server
                .url
                .as_deref()
                .ok_or_else(|| bad_request("an `http` server needs its `url`"))?;
            check_webhook_url(url, urls).map_err(|r| bad_request(r.message.replacen("webhook.url", "`url`", 1)))?;
            if server.command.is_some() || !server.args.is_empty() || !server.env.is_empty() {
                return Err(bad_request(
                    "an `http` server takes no `command`, `args` or `env` (those are a `stdio` server's)",
                ));
            }
        }
        McpTransport::Stdio => {
            let command = server
                .command
                .as_deref()
                .ok_or_else(|| bad_request("a `stdio` server needs its `command`"))?;
            if command.trim().is_empty() || command.len() > MAX_ARG_BYTES || command.contains('\0') {
                return Err(bad_request(format!(
                    "`command` must be a program of 1 to {MAX_ARG_BYTES} bytes, without NUL"
                )));
            }
            if server.url.is_some() || !server.headers.is_empty() {
                return Err(bad_request(
                    "a `stdio` server takes no `url` or `headers` (those are an `http` server's)",
                ));
            }
        }
    }
    if server.args.len() > MAX_ARGS {
        return Err(bad_request(format!("`args` has more than {MAX_ARGS} arguments")));
    }
    if server.args.iter().any(|a| a.len() > MAX_ARG_BYTES || a.contains('\0')) {
        return Err(bad_request(format!(
            "each of `args` must be at most {MAX_ARG_BYTES} bytes, without NUL"
        )));
    }
    if server.headers.len() > MAX_HEADERS {
        return Err(bad_request(format!("`headers` has more than {MAX_HEADERS} headers")));
    }
    if server.env.len() > MAX_ENV {
        return Err(bad_request(format!("`env` has more than {MAX_ENV} variables")));
    }
    for name in server.headers.keys() {
        check_header_name(name)?;
    }
    let mut lower: Vec<String> = server.headers.keys().map(|k| k.to_ascii_lowercase()).collect();
    lower.sort();
    if lower.windows(2).any(|w| w[0] == w[1]) {
        return Err(bad_request(
            "`headers` names a header twice (names are case-insensitive)",
        ));
    }
    for name in server.env.keys() {
        check_env_name(name)?;
    }
    if server.tools.len() > MAX_TOOL_POLICIES {
        return Err(bad_request(format!(
            "`tools` sets more than {MAX_TOOL_POLICIES} policies"
        )));
    }
    for tool in server.tools.keys() {
        if tool.is_empty() || tool.len() > MAX_TOOL_NAME_BYTES || tool.chars().any(char::is_control) {
            return Err(bad_request(format!(
                "each tool of `tools` must be named by 1 to {MAX_TOOL_NAME_BYTES} bytes, without control characters"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_could_not_prefix_tools_are_refused() {
        for good in ["github", "a", "0x", "my-server_2", &"a".repeat(32)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", "GitHub", "-a", "_a", "a b", "a__b", "a.b", &"a".repeat(33), "é"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn header_and_env_names_must_be_names() {
        assert!(check_header_name("Authorization").is_ok());
        assert!(check_header_name("X-Api-Key").is_ok());
        for bad in ["", "Bad Header", "a:b", "é", "Host", "content-length"] {
            assert!(check_header_name(bad).is_err(), "{bad}");
        }
        assert!(check_env_name("API_KEY").is_ok() && check_env_name("_x1").is_ok());
        for bad in ["", "1A", "A-B", "A B", "A=B"] {
            assert!(check_env_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn reserved_header_and_env_names_are_refused_saying_why() {
        for reserved in [
            "Mcp-Session-Id",
            "MCP-PROTOCOL-VERSION",
            "Mcp-Anything",
            "Last-Event-Id",
            "Host",
            "Content-Length",
            "Content-Type",
            "Accept",
            "Connection",
            "Transfer-Encoding",
        ] {
            let e = check_header_name(reserved).unwrap_err();
            assert!(e.to_string().contains("reserved"), "{reserved}: {e}");
        }
        for fine in ["Authorization", "X-Mcp-Token", "McpKey"] {
            assert!(check_header_name(fine).is_ok(), "{fine}");
        }
        for reserved in [
            "PATH",
            "path",
            "HOME",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "LD_AUDIT",
            "DYLD_INSERT_LIBRARIES",
            "NODE_OPTIONS",
            "PYTHONPATH",
            "SPOOL_DATA_KEY",
            "spool_anything",
        ] {
            let e = check_env_name(reserved).unwrap_err();
            assert!(e.to_string().contains("reserved"), "{reserved}: {e}");
        }
        for fine in ["API_KEY", "GITHUB_TOKEN", "NODE_ENV", "LDAP_URL", "MY_SPOOL_ID"] {
            assert!(check_env_name(fine).is_ok(), "{fine}");
        }
        let e = check_header_value("Authorization", "Bearer s3cr3t\r\nX: y").unwrap_err();
        assert!(!e.to_string().contains("s3cr3t"), "{e}");
        assert!(check_env_value("K", "a\0b").is_err());
    }
}
