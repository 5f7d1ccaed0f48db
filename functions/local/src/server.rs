//! # `spool serve`'s HTTP server: bounded connections, timeouts, a prompt shutdown
//!
//! `axum::serve` takes every connection and waits on every client for as long as it likes, so
//! a few hundred silent connections hold a server's file descriptors. This accept loop bounds
//! what a client can hold:
//!
//! - **connections**: at most [`ServerSettings::max_connections`] at once; past that the loop
//!   stops accepting (new clients wait in the kernel's backlog) rather than run out of file
//!   descriptors, and an accept that fails anyway is retried after a pause, never fatal;
//! - **headers and idleness**: a request's headers must arrive within
//!   [`ServerSettings::header_timeout`], which also closes a kept-alive connection that sits
//!   idle that long (hyper's header-read timer runs whenever a connection waits for a request);
//! - **bodies and handlers**: from its headers to its answer a request has
//!   [`ServerSettings::request_timeout`] (`408` in the contract's JSON after it), so a body that
//!   trickles in is cut off; long-polls wait less than that, and SSE responses, once started,
//!   end by their own lifetime;
//! - **shutdown**: on Ctrl-C or SIGTERM the loop stops accepting, live responses are told to end
//!   at once (SSE ends with its resume offset, a long-poll answers `204`), and in-flight
//!   requests get a few seconds to finish.

use std::{convert::Infallible, net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{ConnectInfo, Request},
    http::StatusCode,
    middleware::Next,
    response::{IntoResponse, Response},
};
use hyper_util::rt::{TokioIo, TokioTimer};
use spool_platform::ServerSettings;
use tokio::{net::TcpListener, sync::Semaphore};
use tower::ServiceExt;

/// How long in-flight requests have to finish after a shutdown began.
const DRAIN: Duration = Duration::from_secs(5);

/// Serves `router` on `listener` until `shutdown` completes, then drains.
pub async fn run(
    listener: TcpListener,
    router: Router,
    settings: ServerSettings,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(settings.max_connections.max(1)));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(settings.header_timeout);
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
            () = &mut shutdown => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for connections to close.
                    tracing::warn!(error = %e, "cannot accept a connection; retrying shortly");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let app = router.clone();
        let service = hyper::service::service_fn(move |mut request: Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            let app = app.clone();
            async move { Ok::<_, Infallible>(app.oneshot(request.map(axum::body::Body::new)).await.into_response()) }
        });
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
            drop(permit);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(DRAIN) => tracing::warn!("stopping with requests still in flight"),
    }
}

/// The request deadline: from its headers to its answer (a streamed body, once started, is not
/// bounded here).
pub async fn deadline(limit: Duration, request: Request, next: Next) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => {
            let message = format!(
                "the request took longer than {} s from its headers to its answer (a body sent too slowly?); send it again",
                limit.as_secs_f64()
            );
            spool_edge::respond(
                StatusCode::REQUEST_TIMEOUT,
                spool_edge::ErrorBody::new("request_timeout", message),
                Vec::new(),
            )
        }
    }
}

/// The peer of a request, as [`run`] records it.
pub fn peer(request: &Request) -> Option<SocketAddr> {
    request.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0)
}
