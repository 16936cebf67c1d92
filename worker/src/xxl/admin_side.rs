//! The admin's side of XXL-JOB's protocol, the part executors call: `POST …/api/registry`,
//! `…/api/registryRemove` and `…/api/callback`, with the access token. An executor whose admin
//! address points here registers its address every beat and reports each run's result.
//!
//! Answers are XXL-JOB's: HTTP 200 with `{"code":200,"msg":null,"content":null}`, or code 500
//! and the reason (a wrong token: `The access token is wrong.`), so executors log them as they
//! would an admin's.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use tokio::sync::oneshot;

use super::protocol::{CallbackParam, RegistryParam, ReturnT, ACCESS_TOKEN_HEADER};
use super::share::SharedEvent;
use crate::lock;

/// How long an address stays registered after its last beat (XXL-JOB's `DEAD_TIMEOUT`: three
/// of its 30 s beats).
pub const DEFAULT_DEAD_AFTER: Duration = Duration::from_secs(90);
/// Results remembered after their run was settled, to recognise a repeated or late callback.
const SETTLED_KEPT: usize = 10_000;

/// Executor addresses by app name, each with its last beat.
#[derive(Debug)]
pub struct Registry {
    apps: Mutex<HashMap<String, BTreeMap<String, Instant>>>,
    dead_after: Duration,
}

/// Most apps the registry holds, and most addresses per app: registrations beyond are refused.
pub const MAX_APPS: usize = 1_000;
/// See [`MAX_APPS`].
pub const MAX_ADDRESSES_PER_APP: usize = 1_000;
/// Longest app name or address registered.
pub const MAX_NAME_BYTES: usize = 512;

/// An address as registered, without the trailing `/` Java executors add.
pub fn normalize_address(address: &str) -> String {
    address.trim().trim_end_matches('/').to_owned()
}

impl Registry {
    /// An empty registry whose addresses expire `dead_after` their last beat.
    pub fn new(dead_after: Duration) -> Self {
        Self {
            apps: Mutex::new(HashMap::new()),
            dead_after,
        }
    }

    /// Why a beat of `address` for `app` would not fit: a new app when [`MAX_APPS`] are known,
    /// or a new address when its app has [`MAX_ADDRESSES_PER_APP`].
    pub fn full_for(&self, app: &str, address: &str) -> Option<String> {
        let apps = lock(&self.apps);
        match apps.get(app) {
            None if apps.len() >= MAX_APPS => Some(format!(
                "the bridge knows {MAX_APPS} executor apps already; no new app is registered"
            )),
            Some(addresses)
                if addresses.len() >= MAX_ADDRESSES_PER_APP
                    && !addresses.contains_key(&normalize_address(address)) =>
            {
                Some(format!(
                    "app {app:?} has {MAX_ADDRESSES_PER_APP} executor addresses already; no new \
                     address is registered"
                ))
            }
            _ => None,
        }
    }

    /// Records a beat of `address` for `app`.
    pub fn beat(&self, app: &str, address: &str) {
        self.beat_aged(app, address, Duration::ZERO);
    }

    /// Records a beat of `address` for `app` that happened `age` ago (one another bridge
    /// received); a beat older than the last one known, or than the expiry, changes nothing.
    pub fn beat_aged(&self, app: &str, address: &str, age: Duration) {
        if age >= self.dead_after {
            return;
        }
        let at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        let mut apps = lock(&self.apps);
        let seen = apps
            .entry(app.to_owned())
            .or_default()
            .entry(normalize_address(address))
            .or_insert(at);
        *seen = (*seen).max(at);
    }

    /// Removes `address` from `app` (the executor is stopping).
    pub fn remove(&self, app: &str, address: &str) {
        if let Some(addresses) = lock(&self.apps).get_mut(app) {
            addresses.remove(&normalize_address(address));
        }
    }

    /// Removes `address` from `app` because it deregistered `age` ago, unless it beat since.
    pub fn remove_aged(&self, app: &str, address: &str, age: Duration) {
        let at = Instant::now().checked_sub(age).unwrap_or_else(Instant::now);
        if let Some(addresses) = lock(&self.apps).get_mut(app) {
            let address = normalize_address(address);
            if addresses.get(&address).is_some_and(|seen| *seen <= at) {
                addresses.remove(&address);
            }
        }
    }

    /// The live addresses of `app`, sorted (XXL-JOB sorts them too: `FIRST`, `LAST` and the
    /// broadcast index depend on it).
    pub fn addresses(&self, app: &str) -> Vec<String> {
        let now = Instant::now();
        let mut apps = lock(&self.apps);
        let Some(addresses) = apps.get_mut(app) else {
            return Vec::new();
        };
        addresses.retain(|_, seen| now.duration_since(*seen) < self.dead_after);
        addresses.keys().cloned().collect()
    }

    /// Every app's live addresses.
    pub fn snapshot(&self) -> BTreeMap<String, Vec<String>> {
        let apps: Vec<String> = lock(&self.apps).keys().cloned().collect();
        apps.into_iter()
            .map(|app| {
                let live = self.addresses(&app);
                (app, live)
            })
            .filter(|(_, live)| !live.is_empty())
            .collect()
    }
}

/// How a run the bridge gave up on was settled, for a callback that comes later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Its result arrived (a second callback repeats it).
    Reported,
    /// The bridge stopped waiting: timed out, cancelled, or handed back.
    GaveUp(String),
}

/// What became of a callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A run was waiting for it.
    Delivered,
    /// The run already had its result, or the bridge had given up on it: this one is not
    /// counted again.
    Late(Settled),
    /// No run of this bridge has this log id (another bridge's, or from before a restart).
    Unknown,
}

/// Runs waiting for their executor's callback, by log id.
#[derive(Debug, Default)]
pub struct Callbacks {
    inner: Mutex<CallbackState>,
}

#[derive(Debug, Default)]
struct CallbackState {
    waiting: HashMap<i64, oneshot::Sender<CallbackParam>>,
    settled: HashMap<i64, Settled>,
    order: VecDeque<i64>,
}

impl CallbackState {
    fn settle(&mut self, log_id: i64, how: Settled) {
        if self.settled.insert(log_id, how).is_none() {
            self.order.push_back(log_id);
        }
        while self.order.len() > SETTLED_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.settled.remove(&old);
            }
        }
    }
}

impl Callbacks {
    /// Starts waiting for `log_id`'s result.
    pub fn expect(&self, log_id: i64) -> oneshot::Receiver<CallbackParam> {
        let (tx, rx) = oneshot::channel();
        let mut s = lock(&self.inner);
        // A log id used again (a redelivered run) starts afresh.
        s.settled.remove(&log_id);
        s.waiting.insert(log_id, tx);
        rx
    }

    /// Stops waiting for `log_id`: a callback that still comes is [`Delivery::Late`]. False
    /// when its result was delivered already (it is in the run's receiver).
    pub fn give_up(&self, log_id: i64, why: impl Into<String>) -> bool {
        let mut s = lock(&self.inner);
        if s.waiting.remove(&log_id).is_none() {
            return false;
        }
        s.settle(log_id, Settled::GaveUp(why.into()));
        true
    }

    /// How `log_id` was settled, if it was (and is still remembered).
    pub fn settled(&self, log_id: i64) -> Option<Settled> {
        lock(&self.inner).settled.get(&log_id).cloned()
    }

    /// Whether a run waits for `log_id`.
    pub fn is_waiting(&self, log_id: i64) -> bool {
        lock(&self.inner).waiting.contains_key(&log_id)
    }

    /// Hands a callback to the run waiting for it; the first result of a run wins.
    pub fn deliver(&self, item: CallbackParam) -> Delivery {
        let mut s = lock(&self.inner);
        if let Some(how) = s.settled.get(&item.log_id) {
            return Delivery::Late(how.clone());
        }
        let Some(tx) = s.waiting.remove(&item.log_id) else {
            return Delivery::Unknown;
        };
        s.settle(item.log_id, Settled::Reported);
        match tx.send(item) {
            Ok(()) => Delivery::Delivered,
            // The run stopped waiting between the two steps.
            Err(_) => Delivery::Late(Settled::GaveUp("the run stopped waiting".to_owned())),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: String,
}

/// What the executor-facing endpoints share.
pub struct AdminSide {
    /// Who is registered.
    pub registry: Registry,
    /// Who waits for a result.
    pub callbacks: Callbacks,
    token: Option<String>,
    counted: Family<OutcomeLabel, Counter>,
    share: std::sync::OnceLock<tokio::sync::mpsc::Sender<SharedEvent>>,
    policy: crate::net_policy::AddressPolicy,
}

impl std::fmt::Debug for AdminSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminSide")
            .field("registry", &self.registry)
            .field("callbacks", &self.callbacks)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl AdminSide {
    /// `token`: the access token executors must send (none or blank: not checked, as XXL-JOB);
    /// `policy`: the addresses executors may register.
    pub fn new(
        token: Option<String>,
        dead_after: Duration,
        policy: crate::net_policy::AddressPolicy,
    ) -> Self {
        Self {
            registry: Registry::new(dead_after),
            callbacks: Callbacks::default(),
            token: token.filter(|t| !t.trim().is_empty()),
            counted: Family::default(),
            share: std::sync::OnceLock::new(),
            policy,
        }
    }

    /// Why `address` may not be registered for `app`: not a URL the bridge would call
    /// ([`super::protocol::executor_url`]), an address the policy denies, or a registry full.
    fn refuse(&self, app: &str, address: &str) -> Option<String> {
        if app.len() > MAX_NAME_BYTES || address.len() > MAX_NAME_BYTES {
            return Some(format!(
                "an app name or address longer than {MAX_NAME_BYTES} bytes is not registered"
            ));
        }
        if let Err(why) = super::protocol::executor_url(address, &self.policy) {
            return Some(why);
        }
        self.registry.full_for(app, address)
    }

    /// The signature of a shared record's `payload` (HMAC-SHA256 keyed with the access token,
    /// hex), or `None` without a token.
    pub fn sign(&self, payload: &[u8]) -> Option<String> {
        use hmac::Mac as _;
        let token = self.token.as_ref()?;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(token.as_bytes()).ok()?;
        mac.update(payload);
        Some(
            mac.finalize()
                .into_bytes()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        )
    }

    /// Whether a shared record's `payload` carries the signature of a bridge holding the same
    /// access token (always, without a token: the bridge then listens on loopback only).
    pub fn signed(&self, payload: &[u8], signature: Option<&[u8]>) -> bool {
        match self.sign(payload) {
            None => true,
            Some(expected) => {
                signature.is_some_and(|given| constant_time_eq(given, expected.as_bytes()))
            }
        }
    }

    /// Hands what executors tell this bridge to the other bridges through `tx`
    /// ([`super::share`]). Set once.
    pub fn share_with(&self, tx: tokio::sync::mpsc::Sender<SharedEvent>) {
        if self.share.set(tx).is_err() {
            tracing::warn!("the bridge is already shared");
        }
    }

    /// Whether `event` was handed to the other bridges.
    fn tell_others(&self, event: SharedEvent) -> bool {
        self.share
            .get()
            .is_some_and(|tx| tx.try_send(event).is_ok())
    }

    /// Applies what another bridge received `age` ago.
    pub fn apply_shared(&self, event: SharedEvent, age: Duration) {
        match event {
            SharedEvent::Beat { app, address } => {
                if let Some(why) = self.refuse(&app, &address) {
                    tracing::debug!(%app, %why, "a registration shared by another bridge is not applied");
                    return;
                }
                self.registry.beat_aged(&app, &address, age)
            }
            SharedEvent::Remove { app, address } => self.registry.remove_aged(&app, &address, age),
            SharedEvent::Callback { item } => {
                let log_id = item.log_id;
                if self.callbacks.settled(log_id).is_none() && !self.callbacks.is_waiting(log_id) {
                    // Another bridge's run, or one from before a restart.
                    return;
                }
                self.deliver(item, false);
            }
        }
    }

    /// Delivers a callback; counts and logs what became of it. `first_hand`: this bridge got it
    /// from the executor (so one it does not know is handed to the others).
    fn deliver(&self, item: CallbackParam, first_hand: bool) {
        let item = item.clipped();
        let log_id = item.log_id;
        let code = item.handle_code;
        let msg = item.message().unwrap_or_default();
        let copy = first_hand.then(|| item.clone());
        match self.callbacks.deliver(item) {
            Delivery::Delivered => self.count("delivered"),
            Delivery::Late(Settled::Reported) => {
                self.count("repeated");
                tracing::debug!(log_id, "xxl callback repeated; the first result stands");
            }
            Delivery::Late(Settled::GaveUp(why)) => {
                self.count("late");
                tracing::info!(log_id, code, %msg, settled = %why,
                    "xxl result after the run was settled: recorded as late, not as the run's result");
            }
            Delivery::Unknown => {
                if copy.is_some_and(|item| self.tell_others(SharedEvent::Callback { item })) {
                    self.count("forwarded");
                    tracing::debug!(log_id, "xxl callback of a run this bridge does not know: handed to the other bridges");
                } else {
                    self.count("unknown");
                    tracing::warn!(log_id, code, %msg, "xxl callback for a run this bridge does not know");
                }
            }
        }
    }

    /// Registers `xxl_callbacks` (callbacks received, by what became of them: `delivered`,
    /// `repeated`, `late`, `forwarded`, `unknown`).
    pub fn register_metrics(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register(
            "xxl_callbacks",
            "Results XXL-JOB executors reported to the bridge, by what became of them: delivered \
             (the run's result), repeated (a run's result again), late (after the run timed out, \
             was cancelled or moved; not counted as its result), forwarded (to the other bridge \
             workers), unknown (no run of any bridge)",
            self.counted.clone(),
        );
    }

    /// How many callbacks ended as `outcome` (see [`Self::register_metrics`]).
    pub fn callbacks_counted(&self, outcome: &str) -> u64 {
        self.counted
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .get()
    }

    fn count(&self, outcome: &str) {
        self.counted
            .get_or_create(&OutcomeLabel {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    fn token_ok(&self, headers: &HeaderMap) -> bool {
        let Some(want) = &self.token else {
            return true;
        };
        let got = headers
            .get(ACCESS_TOKEN_HEADER)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        constant_time_eq(got, want.as_bytes())
    }
}

/// Compares without an early exit, so the time taken does not tell how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The router executors call. Mounted anywhere: it answers any path ending in
/// `/api/registry`, `/api/registryRemove` or `/api/callback`, so both `http://bridge:9700/` and
/// `http://bridge:9700/xxl-job-admin/` work as an executor's admin address.
///
/// `GET /executors` (with the token) lists the live addresses of each app:
/// `{"apps": {"billing-app": ["http://10.0.0.5:9999"]}}`.
///
/// A request body may hold up to [`MAX_CALL_BYTES`]: an executor's callback repeats its
/// message (`handleMsg` and `executeResult.msg`), and a handler may answer a long one (the run
/// keeps its first 8 KiB).
pub fn router(state: Arc<AdminSide>) -> axum::Router {
    axum::Router::new()
        .route("/executors", axum::routing::get(executors))
        .fallback(answer)
        .layer(axum::extract::DefaultBodyLimit::max(MAX_CALL_BYTES))
        .with_state(state)
}

/// The largest request an executor may send the bridge.
pub const MAX_CALL_BYTES: usize = 8 * 1024 * 1024;

async fn executors(State(state): State<Arc<AdminSide>>, headers: HeaderMap) -> Response {
    if !state.token_ok(&headers) {
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({
                "code": "bad_token",
                "message": format!("send the bridge's access token in {ACCESS_TOKEN_HEADER}"),
            })),
        )
            .into_response();
    }
    Json(serde_json::json!({ "apps": state.registry.snapshot() })).into_response()
}

async fn answer(
    State(state): State<Arc<AdminSide>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Json<ReturnT> {
    Json(handle(&state, &method, uri.path(), &headers, &body))
}

fn handle(
    state: &AdminSide,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> ReturnT {
    let Some((_, uri)) = path.rsplit_once("/api/") else {
        return ReturnT::fail(format!("invalid request, uri-mapping({path}) not found."));
    };
    if method != Method::POST {
        return ReturnT::fail("invalid request, HttpMethod not support.");
    }
    if !state.token_ok(headers) {
        return ReturnT::fail("The access token is wrong.");
    }
    match uri {
        "registry" | "registryRemove" => {
            let p: RegistryParam = match serde_json::from_slice(body) {
                Ok(p) => p,
                Err(e) => return ReturnT::fail(format!("invalid registry body: {e}")),
            };
            if p.registry_group.trim().is_empty()
                || p.registry_key.trim().is_empty()
                || p.registry_value.trim().is_empty()
            {
                return ReturnT::fail("Illegal Argument.");
            }
            let (app, address) = (p.registry_key, p.registry_value);
            if uri == "registry" {
                if let Some(why) = state.refuse(&app, &address) {
                    tracing::warn!(%app, address = %address.chars().take(200).collect::<String>(), %why, "xxl executor registration refused");
                    return ReturnT::fail(why);
                }
                state.registry.beat(&app, &address);
                state.tell_others(SharedEvent::Beat { app, address });
            } else {
                tracing::info!(%app, %address, "xxl executor deregistered");
                state.registry.remove(&app, &address);
                state.tell_others(SharedEvent::Remove { app, address });
            }
            ReturnT::success()
        }
        "callback" => {
            let items: Vec<CallbackParam> = match serde_json::from_slice(body) {
                Ok(items) => items,
                Err(e) => return ReturnT::fail(format!("invalid callback body: {e}")),
            };
            for item in items {
                state.deliver(item, true);
            }
            ReturnT::success()
        }
        other => ReturnT::fail(format!("invalid request, uri-mapping({other}) not found.")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The default executor policy, with loopback allowed (the executors of these tests).
    fn loopback_too() -> crate::net_policy::AddressPolicy {
        crate::net_policy::AddressPolicy::new(
            vec!["127.0.0.0/8".parse().unwrap()],
            Vec::new(),
            super::super::protocol::EXECUTOR_SETTINGS,
        )
    }

    #[test]
    fn registrations_are_urls_the_policy_allows_and_the_registry_is_bounded() {
        let s = AdminSide::new(None, DEFAULT_DEAD_AFTER, loopback_too());
        let refused = |app: &str, address: &str| s.refuse(app, address);
        assert_eq!(refused("a", "http://10.0.0.5:9999/"), None);
        assert_eq!(refused("a", "https://exec.internal:9999"), None);
        assert_eq!(refused("a", "http://127.0.0.1:9999"), None);
        for bad in [
            "http://169.254.169.254/latest/meta-data",
            "http://100.100.100.200:80",
            "http://10.0.0.5:9999/#/steal",
            "http://10.0.0.5:9999/?x=1",
            "http://user:pw@10.0.0.5:9999",
            "file:///etc/passwd",
            "10.0.0.5:9999",
        ] {
            assert!(refused("a", bad).is_some(), "{bad} was accepted");
        }
        for i in 0..MAX_ADDRESSES_PER_APP {
            s.registry
                .beat("a", &format!("http://10.0.{}.{}:9999", i / 250, i % 250));
        }
        assert!(refused("a", "http://10.9.9.9:9999").is_some());
        assert_eq!(
            refused("a", "http://10.0.0.0:9999"),
            None,
            "a known address beats again"
        );
        assert_eq!(refused("b", "http://10.9.9.9:9999"), None);
    }

    fn post(
        state: &AdminSide,
        path: &str,
        token: Option<&str>,
        body: serde_json::Value,
    ) -> ReturnT {
        let mut headers = HeaderMap::new();
        if let Some(t) = token {
            headers.insert(ACCESS_TOKEN_HEADER, t.parse().unwrap());
        }
        handle(
            state,
            &Method::POST,
            path,
            &headers,
            body.to_string().as_bytes(),
        )
    }

    fn registry(app: &str, address: &str) -> serde_json::Value {
        json!({"registryGroup": "EXECUTOR", "registryKey": app, "registryValue": address})
    }

    #[test]
    fn registry_needs_the_token_and_forgets_silent_addresses() {
        let s = AdminSide::new(
            Some("s3cret".into()),
            Duration::from_millis(200),
            loopback_too(),
        );
        let r = post(
            &s,
            "/xxl-job-admin/api/registry",
            Some("wrong"),
            registry("billing", "http://a:1/"),
        );
        assert_eq!(
            (r.code, r.message().as_deref()),
            (500, Some("The access token is wrong."))
        );
        let r = post(
            &s,
            "/api/registry",
            None,
            registry("billing", "http://a:1/"),
        );
        assert_eq!(r.code, 500);
        assert!(s.registry.addresses("billing").is_empty());

        for a in ["http://b:2", "http://a:1/"] {
            let r = post(
                &s,
                "/xxl-job-admin/api/registry",
                Some("s3cret"),
                registry("billing", a),
            );
            assert_eq!(r.code, 200, "{r:?}");
        }
        assert_eq!(
            s.registry.addresses("billing"),
            ["http://a:1", "http://b:2"]
        );
        let r = post(
            &s,
            "/api/registryRemove",
            Some("s3cret"),
            registry("billing", "http://b:2/"),
        );
        assert_eq!(r.code, 200);
        assert_eq!(s.registry.addresses("billing"), ["http://a:1"]);
        std::thread::sleep(Duration::from_millis(250));
        assert!(s.registry.addresses("billing").is_empty());

        let r = post(
            &s,
            "/api/registry",
            Some("s3cret"),
            registry("", "http://a:1"),
        );
        assert_eq!(r.message().as_deref(), Some("Illegal Argument."));
        let r = post(&s, "/api/nothing", Some("s3cret"), json!({}));
        assert_eq!(r.code, 500);
        let r = handle(&s, &Method::GET, "/api/registry", &HeaderMap::new(), b"");
        assert_eq!(r.code, 500);
    }

    #[test]
    fn first_callback_wins_and_late_ones_are_recognised() {
        let s = AdminSide::new(None, DEFAULT_DEAD_AFTER, loopback_too());
        let mut rx = s.callbacks.expect(7);
        let cb = |code: i64, msg: &str| json!([{"logId": 7, "logDateTim": 1, "handleCode": code, "handleMsg": msg}]);
        assert_eq!(post(&s, "/api/callback", None, cb(200, "done")).code, 200);
        let got = rx.try_recv().unwrap();
        assert_eq!(
            (got.handle_code, got.message().as_deref()),
            (200, Some("done"))
        );
        // pyxxl repeats a callback with 500 when an answer displeased it: not counted.
        post(&s, "/api/callback", None, cb(500, "again"));
        assert_eq!(
            s.callbacks
                .deliver(serde_json::from_value(cb(500, "x")[0].clone()).unwrap()),
            Delivery::Late(Settled::Reported)
        );

        let _rx = s.callbacks.expect(8);
        assert!(s.callbacks.give_up(8, "timed out after 1s"));
        let late = CallbackParam {
            log_id: 8,
            log_date_tim: 0,
            handle_code: 200,
            handle_msg: json!("ok"),
        };
        assert_eq!(
            s.callbacks.deliver(late.clone()),
            Delivery::Late(Settled::GaveUp("timed out after 1s".into()))
        );
        assert_eq!(
            s.callbacks.deliver(CallbackParam {
                log_id: 9,
                ..late.clone()
            }),
            Delivery::Unknown
        );
        // Giving up after the result came says so (the run takes the result instead).
        let _rx = s.callbacks.expect(10);
        s.callbacks.deliver(CallbackParam {
            log_id: 10,
            ..late.clone()
        });
        assert!(!s.callbacks.give_up(10, "too late to give up"));
        // A log id used again starts afresh.
        let mut again = s.callbacks.expect(8);
        assert_eq!(s.callbacks.deliver(late.clone()), Delivery::Delivered);
        assert_eq!(again.try_recv().unwrap().log_id, 8);
        // A body that is not a list of callbacks is refused, not half read.
        assert_eq!(
            post(&s, "/api/callback", None, json!({"logId": 1})).code,
            500
        );
    }

    #[test]
    fn shared_events_register_and_deliver_like_first_hand_ones() {
        let s = AdminSide::new(None, Duration::from_secs(90), loopback_too());
        let (tx, mut rx) = tokio::sync::mpsc::channel(16);
        s.share_with(tx);
        let beat = |address: &str| SharedEvent::Beat {
            app: "billing".into(),
            address: address.into(),
        };
        // Beats another bridge got: recent ones count, ones older than the expiry do not.
        s.apply_shared(beat("http://a:1"), Duration::from_secs(5));
        s.apply_shared(beat("http://old:1"), Duration::from_secs(91));
        assert_eq!(s.registry.addresses("billing"), ["http://a:1"]);
        // A deregistration older than the last beat seen changes nothing; a newer one removes.
        s.registry.beat("billing", "http://a:1");
        let remove = SharedEvent::Remove {
            app: "billing".into(),
            address: "http://a:1".into(),
        };
        s.apply_shared(remove.clone(), Duration::from_secs(3));
        assert_eq!(s.registry.addresses("billing"), ["http://a:1"]);
        s.apply_shared(remove, Duration::ZERO);
        assert!(s.registry.addresses("billing").is_empty());

        // What executors tell this bridge is handed on.
        post(&s, "/api/registry", None, registry("billing", "http://b:2"));
        assert_eq!(rx.try_recv().unwrap(), beat("http://b:2"));
        // A result this bridge does not know goes to the others, once.
        let item = |log_id| json!([{"logId": log_id, "handleCode": 200, "handleMsg": "ok"}]);
        post(&s, "/api/callback", None, item(7));
        assert!(
            matches!(rx.try_recv().unwrap(), SharedEvent::Callback { item } if item.log_id == 7)
        );
        assert_eq!(s.callbacks_counted("forwarded"), 1);
        // One handed on by another bridge reaches the run waiting here; others' are ignored.
        let mut waiting = s.callbacks.expect(8);
        let shared = |log_id| SharedEvent::Callback {
            item: CallbackParam {
                log_id,
                log_date_tim: 0,
                handle_code: 200,
                handle_msg: json!("ok"),
            },
        };
        s.apply_shared(shared(9), Duration::ZERO);
        s.apply_shared(shared(8), Duration::ZERO);
        assert_eq!(waiting.try_recv().unwrap().log_id, 8);
        assert_eq!(s.callbacks_counted("delivered"), 1);
        assert_eq!(s.callbacks_counted("unknown"), 0);
        assert!(rx.try_recv().is_err(), "nothing handed on again");
    }
}
