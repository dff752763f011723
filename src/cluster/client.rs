//! The connection to a cluster: kubeconfig → `kube::Client`, errors turned into sentences that
//! name the context, server and object, and retries for the failures worth retrying.

use crate::error::{Error, Result};
use crate::kinds::ApiKind;
use crate::kubeconfig;
use kube::config::Config;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// A connected cluster and how we got there (for messages).
#[derive(Clone)]
pub struct Cluster {
    pub client: kube::Client,
    /// Kube context name (or "(in-cluster)").
    pub context: String,
    /// API server URL as shown to people: its userinfo masked ([`crate::text::redact_url`]).
    pub server: String,
    /// Discovery answers of this command, per group/version: the plurals served (asked once).
    served: Arc<Mutex<HashMap<&'static str, Vec<String>>>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("context", &self.context)
            .field("server", &self.server)
            .finish()
    }
}

/// Connects to context `context` (or the current one) of the kubeconfig, like kubectl.
/// Nothing is sent yet.
pub async fn connect(
    kc: &kubeconfig::Loaded,
    context: Option<&str>,
    log_requests: bool,
) -> Result<Cluster> {
    let kc = match kc {
        kubeconfig::Loaded::Found(k) => k.as_ref().clone(),
        kubeconfig::Loaded::Missing(looked) => {
            return Err(Error::input(format!("no kubeconfig: {looked}"))
                .hint("point --kubeconfig or KUBECONFIG at your cluster's kubeconfig, or use `--dry-run` / `--backend local`"));
        }
    };
    let context = context
        .map(str::to_owned)
        .or(kc.current_context.clone())
        .unwrap_or_default();
    if !kc.contexts.iter().any(|c| c.name == context) {
        let known: Vec<&str> = kc.contexts.iter().map(|c| c.name.as_str()).collect();
        let what = if context.is_empty() {
            "the kubeconfig has no current context".to_string()
        } else {
            format!("context `{context}` is not in the kubeconfig")
        };
        return Err(Error::input(what).hint(if known.is_empty() {
            "the kubeconfig defines no contexts".to_string()
        } else {
            format!("pick one with --context: {}", known.join(", "))
        }));
    }
    kubeconfig::check_named_files(&kc, &context)?;
    let options = kubeconfig::options(Some(context.clone()));
    let config = Config::from_custom_kubeconfig(kc, &options)
        .await
        .map_err(|e| Error::input(format!("kubeconfig context `{context}`: {e}")))?;
    let server =
        crate::text::redact_url(config.cluster_url.to_string().trim_end_matches('/')).into_owned();
    let client = client_for(config, log_requests).map_err(|e| {
        Error::failure(format!(
            "cannot set up a client for {server} (context `{context}`): {e}"
        ))
        .caused_by(e)
    })?;
    Ok(Cluster::new(client, context, server))
}

/// How much of an API server's answer one read of a connection takes. hyper's default lets
/// each connection's read buffer grow to ~400 KB while its stream is read fast, and `logs -f`
/// holds a connection per container; a fixed size keeps 32 live streams in 2 MB.
const READ_BUFFER: usize = 64 * 1024;

/// kube's client stack as `ClientBuilder::try_from` makes it for hvdctl's features (TLS by
/// rustls, the kubeconfig's timeouts, the server-error retries, its auth and extra headers;
/// kube is built without proxy support), on a connection pool whose reads are
/// [`READ_BUFFER`] long, with every request logged under `-v`.
fn client_for(config: Config, log_requests: bool) -> kube::Result<kube::Client> {
    use kube::client::ConfigExt;
    if let Some(proxy) = &config.proxy_url {
        return Err(kube::Error::ProxyProtocolUnsupported {
            proxy_url: Box::new(proxy.clone()),
        });
    }
    let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
    http.enforce_http(false);
    let mut connector =
        hyper_timeout::TimeoutConnector::new(config.rustls_https_connector_with_connector(http)?);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    let pool = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http1_read_buf_exact_size(READ_BUFFER)
        .build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .option_layer(log_requests.then_some(LogRequests))
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(pool);
    Ok(kube::client::ClientBuilder::new(service, config.default_namespace).build())
}

impl Cluster {
    pub fn new(client: kube::Client, context: String, server: String) -> Cluster {
        Cluster {
            client,
            context,
            server: crate::text::redact_url(&server).into_owned(),
            served: Default::default(),
        }
    }

    /// Whether the cluster serves kind `k`. Core kinds always are; custom kinds are looked up
    /// by discovery, once per group/version per command.
    pub async fn serves(&self, k: ApiKind) -> Result<bool> {
        if !crate::kinds::is_custom(&k) {
            return Ok(true);
        }
        let mut served = self.served.lock().await;
        if let Some(plurals) = served.get(k.api_version) {
            return Ok(plurals.iter().any(|p| p == k.plural));
        }
        let plurals = match retry(ATTEMPTS, || {
            self.client.list_api_group_resources(k.api_version)
        })
        .await
        {
            Ok(list) => list.resources.into_iter().map(|r| r.name).collect(),
            Err(e) if status_code(&e) == Some(404) => vec![],
            Err(e) => return Err(self.error(&format!("discover {}", k.api_version), &e)),
        };
        let yes = plurals.iter().any(|p| p == k.plural);
        served.insert(k.api_version, plurals);
        Ok(yes)
    }

    /// Turns a kube error into one for people. `what` says what was being done
    /// ("create Job mnist-abcde in namespace ml").
    pub fn error(&self, what: &str, e: &kube::Error) -> Error {
        match e {
            kube::Error::Api(s) => {
                let mut err = Error::failure(format!(
                    "{what}: the API server said {} {}: {}",
                    s.code,
                    s.reason,
                    s.message
                ));
                err = match s.code {
                    401 => err.hint(format!("your credentials for context `{}` were rejected; log in again", self.context)),
                    403 => err.hint("your account lacks the permission named above; ask a cluster admin for an RBAC Role granting it"),
                    404 if s.details.as_ref().is_some_and(|d| d.kind == "namespaces") => {
                        err.hint("create the namespace (`hvdctl deploy --create-namespace`) or pick another with -n")
                    }
                    429 | 500..=599 => err.hint("the API server is overloaded or failing; try again shortly"),
                    _ => err,
                };
                err.caused_by(kube::core::Status::clone(s))
            }
            other => Error::failure(format!(
                "{what}: cannot reach the API server at {} (context `{}`): {}",
                self.server,
                self.context,
                root_cause(other)
            ))
            .hint("check that the cluster is running and the kubeconfig's server address is right (`kubectl cluster-info`)")
            .caused_by(crate::error::Copied::of(other)),
        }
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

/// The HTTP status of an API error, if it is one.
pub fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Whether a failed request is worth repeating: throttling, server errors, broken connections.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Runs `op` until it succeeds, fails for good, or `attempts` are spent (backoff 100 ms → 2 s).
/// Only for idempotent requests (get, list, apply, delete).
pub async fn retry<T, F, Fut>(attempts: u32, mut op: F) -> Result<T, kube::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let mut delay = Duration::from_millis(100);
    let mut n = 0;
    loop {
        n += 1;
        match op().await {
            // A server that refuses connections is rarely back within seconds: give up sooner.
            Err(e) if n < attempts && is_transient(&e) && (status_code(&e).is_some() || n < 3) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Attempts used by [`retry`] for ordinary requests.
pub const ATTEMPTS: u32 = 8;

/// `-v`: every API request on stderr — method, path and query, status, milliseconds to the
/// response's head (streams such as logs and watches go on after that).
#[derive(Clone, Copy)]
struct LogRequests;

impl<S> tower_layer::Layer<S> for LogRequests {
    type Service = LoggedService<S>;
    fn layer(&self, inner: S) -> LoggedService<S> {
        LoggedService(inner)
    }
}

#[derive(Clone)]
struct LoggedService<S>(S);

impl<S, B> tower_service::Service<http::Request<kube::client::Body>> for LoggedService<S>
where
    S: tower_service::Service<http::Request<kube::client::Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    S::Error: std::fmt::Display,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = std::pin::Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<kube::client::Body>) -> Self::Future {
        let method = req.method().clone();
        let path = req
            .uri()
            .path_and_query()
            .map_or_else(|| req.uri().path().to_string(), |p| p.to_string());
        let started = std::time::Instant::now();
        let fut = self.0.call(req);
        Box::pin(async move {
            let r = fut.await;
            let ms = started.elapsed().as_millis();
            let line = match &r {
                Ok(resp) => format!("{method} {path} {} {ms} ms", resp.status().as_u16()),
                Err(e) => format!("{method} {path} failed ({e}) {ms} ms"),
            };
            crate::errln!("{}", crate::text::for_terminal(&line));
            r
        })
    }
}
