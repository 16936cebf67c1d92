//! Which network addresses outbound HTTP requests may reach: the `http` built-in's requests and
//! the admin's alarm webhooks (which is why this module is public).
//!
//! An [`AddressPolicy`] decides on every address a request would connect to, after DNS
//! resolution and at the time of the request (DNS answers change):
//!
//! 1. an address in the explicit deny list is denied;
//! 2. else an address in the explicit allow list is allowed;
//! 3. else an address in [`DEFAULT_DENY`] (loopback, link-local — where cloud metadata services
//!    such as 169.254.169.254 answer —, unspecified, multicast, broadcast, and two further cloud
//!    metadata addresses) is denied;
//! 4. else it is allowed (private ranges included: services inside the same network are the
//!    usual targets).
//!
//! [`AddressPolicy::client_builder`] gives a `reqwest` client that enforces it: host names are
//! resolved by a resolver that hands the connector only allowed addresses (so the address
//! checked is the address connected to, and a second, different DNS answer cannot slip in), and
//! proxies are not used (a proxy would connect on our behalf to an address we never see). A URL
//! whose host is an IP address is not resolved, so callers check it with
//! [`AddressPolicy::check_url`] before sending, and redirects with
//! [`AddressPolicy::redirect_policy`].

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

pub use ipnet::IpNet;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use reqwest::redirect;
use reqwest::Url;

/// One entry of [`DEFAULT_DENY`]: a block and what it is.
#[derive(Debug, Clone, Copy)]
pub struct DeniedBlock {
    /// The block.
    pub net: IpNet,
    /// What it is, for messages ("loopback", "link-local", …).
    pub what: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8, what: &'static str) -> DeniedBlock {
    DeniedBlock {
        net: IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), len),
        what,
    }
}

const fn v6(segments: [u16; 8], len: u8, what: &'static str) -> DeniedBlock {
    let [a, b, c, d, e, f, g, h] = segments;
    DeniedBlock {
        net: IpNet::new_assert(IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)), len),
        what,
    }
}

/// Addresses denied unless an allow list names them.
pub const DEFAULT_DENY: &[DeniedBlock] = &[
    v4(127, 0, 0, 0, 8, "a loopback address"),
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, "a loopback address"),
    v4(169, 254, 0, 0, 16, "a link-local address"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "a link-local address"),
    v4(0, 0, 0, 0, 8, "an unspecified address"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, "an unspecified address"),
    v4(224, 0, 0, 0, 4, "a multicast address"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "a multicast address"),
    v4(255, 255, 255, 255, 32, "the broadcast address"),
    v4(100, 100, 100, 200, 32, "a cloud metadata service address"),
    v6(
        [0xfd00, 0x0ec2, 0, 0, 0, 0, 0, 0x0254],
        128,
        "a cloud metadata service address",
    ),
];

/// Parses one entry of an allow or deny list: a CIDR block (`10.0.0.0/8`, `fd00::/8`) or a
/// single address (`10.1.2.3`, `::1`). Host bits below the prefix are ignored.
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    if let Ok(net) = s.parse::<IpNet>() {
        return Ok(net.trunc());
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Ok(IpNet::from(ip));
    }
    Err(format!(
        "{s:?} is not an IP address or CIDR block (e.g. 10.0.0.0/8, 10.1.2.3, fd00::/8)"
    ))
}

/// Parses an allow or deny list: entries of [`parse_net`] separated by commas; empty entries
/// (an empty setting, a trailing comma) are skipped.
pub fn parse_list(s: &str) -> Result<NetList, String> {
    s.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(parse_net)
        .collect::<Result<Vec<_>, _>>()
        .map(NetList)
}

/// An allow or deny list (see [`parse_list`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetList(pub Vec<IpNet>);

/// Why an address may not be reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DenyReason {
    /// In the explicit deny list.
    Listed(IpNet),
    /// In [`DEFAULT_DENY`] and not in the allow list.
    Default(DeniedBlock),
}

impl PartialEq for DeniedBlock {
    fn eq(&self, other: &Self) -> bool {
        self.net == other.net
    }
}
impl Eq for DeniedBlock {}

/// A request would reach an address its policy denies. Its message names the host (never the
/// rest of the URL, which may carry credentials), the address and the setting to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Denied {
    /// The host name or address of the URL.
    pub host: String,
    /// The denied address.
    pub addr: IpAddr,
    /// Why.
    pub reason: DenyReason,
    /// Prefix of the settings of the policy, e.g. `CADENZA_HTTP`.
    pub settings: &'static str,
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.settings;
        if self.host == self.addr.to_string() {
            write!(f, "address {}", self.addr)?;
        } else {
            write!(f, "{} resolves to {}", self.host, self.addr)?;
        }
        match &self.reason {
            DenyReason::Listed(net) => write!(f, ", which is denied by {net} in {s}_DENY"),
            DenyReason::Default(b) => write!(
                f,
                ", {} ({}), denied unless {s}_ALLOW lists it",
                b.what, b.net
            ),
        }
    }
}

/// A host that resolved to no address at all.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0} resolves to no address")]
pub struct NoAddress(pub String);

/// Allow and deny lists for outbound requests; see the module documentation for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressPolicy {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
    settings: &'static str,
}

impl AddressPolicy {
    /// A policy with these lists; `settings` is the prefix of the settings that configure it
    /// (`CADENZA_HTTP`, `CADENZA_ALARM`), used in messages.
    pub fn new(allow: Vec<IpNet>, deny: Vec<IpNet>, settings: &'static str) -> Self {
        Self {
            allow,
            deny,
            settings,
        }
    }

    /// The default policy (no allow or deny list of its own).
    pub fn default_for(settings: &'static str) -> Self {
        Self::new(Vec::new(), Vec::new(), settings)
    }

    /// Why `addr` may not be reached, or `None` when it may.
    pub fn reason_to_deny(&self, addr: IpAddr) -> Option<DenyReason> {
        // ::ffff:127.0.0.1 is 127.0.0.1.
        let addr = addr.to_canonical();
        if let Some(net) = self.deny.iter().find(|n| n.contains(&addr)) {
            return Some(DenyReason::Listed(*net));
        }
        if self.allow.iter().any(|n| n.contains(&addr)) {
            return None;
        }
        DEFAULT_DENY
            .iter()
            .find(|b| b.net.contains(&addr))
            .map(|b| DenyReason::Default(*b))
    }

    /// Checks one address reached for `host`.
    pub fn check(&self, host: &str, addr: IpAddr) -> Result<(), Denied> {
        match self.reason_to_deny(addr) {
            None => Ok(()),
            Some(reason) => Err(Denied {
                host: host.to_owned(),
                addr,
                reason,
                settings: self.settings,
            }),
        }
    }

    /// Checks a URL whose host is an IP address (such a host is connected to without
    /// resolution); a host name passes here and is checked when it is resolved.
    pub fn check_url(&self, url: &Url) -> Result<(), Denied> {
        // The URL parser has already normalised any IP address form (`2130706433`, `0x7f.1`)
        // to a dotted or bracketed address, and never leaves a name that parses as one.
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => self.check(bare, ip),
            Err(_) => Ok(()),
        }
    }

    /// A client builder whose connections only reach addresses this policy allows (see the
    /// module documentation). Set a redirect policy on it: [`Self::redirect_policy`] or
    /// `redirect::Policy::none()`.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        reqwest::Client::builder()
            .no_proxy()
            .dns_resolver(Arc::new(PolicyResolver {
                policy: self.clone(),
            }))
            .redirect(redirect::Policy::none())
    }

    /// Follows at most `max` redirects, each to an allowed address (a host name is checked when
    /// it is resolved, an IP address here).
    pub fn redirect_policy(&self, max: usize) -> redirect::Policy {
        let policy = self.clone();
        redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() > max {
                return attempt.error(TooManyRedirects(max));
            }
            match policy.check_url(attempt.url()) {
                Ok(()) => attempt.follow(),
                Err(denied) => attempt.error(denied),
            }
        })
    }
}

/// More redirects than allowed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("more than {0} redirects")]
pub struct TooManyRedirects(pub usize);

/// Resolves with the system resolver and keeps only the addresses the policy allows.
struct PolicyResolver {
    policy: AddressPolicy,
}

impl Resolve for PolicyResolver {
    fn resolve(&self, name: Name) -> Resolving {
        Box::pin(resolve_allowed(
            self.policy.clone(),
            name.as_str().to_owned(),
        ))
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The addresses `host` resolves to that `policy` allows; an error when there is none.
async fn resolve_allowed(policy: AddressPolicy, host: String) -> Result<Addrs, BoxError> {
    let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
    let mut denied = None;
    let mut allowed = Vec::with_capacity(resolved.len());
    for a in resolved {
        match policy.check(&host, a.ip()) {
            Ok(()) => allowed.push(a),
            Err(d) => {
                denied.get_or_insert(d);
            }
        }
    }
    if allowed.is_empty() {
        return Err(match denied {
            Some(d) => Box::new(d),
            None => Box::new(NoAddress(host)),
        });
    }
    Ok(Box::new(allowed.into_iter()))
}

/// A `reqwest` error as a message without its URL (which may carry credentials): the policy's
/// refusal when that is the cause, else what failed and the innermost causes.
pub fn describe(e: &reqwest::Error) -> String {
    let mut source = std::error::Error::source(e);
    let mut causes: Vec<String> = Vec::new();
    while let Some(s) = source {
        if let Some(d) = s.downcast_ref::<Denied>() {
            return if e.is_redirect() {
                format!("redirect refused: {d}")
            } else {
                d.to_string()
            };
        }
        if let Some(t) = s.downcast_ref::<TooManyRedirects>() {
            return t.to_string();
        }
        let text = s.to_string();
        if !causes.iter().any(|c| c == &text) {
            causes.push(text);
        }
        source = s.source();
    }
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "cannot connect"
    } else if e.is_redirect() {
        "redirect failed"
    } else if e.is_builder() {
        "bad request"
    } else if e.is_body() || e.is_decode() {
        "reading the answer failed"
    } else {
        "request failed"
    };
    if causes.is_empty() {
        what.to_owned()
    } else {
        format!("{what}: {}", causes.join(": "))
    }
}

/// The host of a URL (for logs: the rest of a URL may carry credentials), or `<bad URL>`.
pub fn url_host(url: &str) -> String {
    match Url::parse(url) {
        Ok(u) => match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{h}:{p}"),
            (Some(h), None) => h.to_owned(),
            (None, _) => "<no host>".to_owned(),
        },
        Err(_) => "<bad URL>".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| parse_net(s).unwrap()).collect()
    }

    #[test]
    fn default_policy_denies_local_and_metadata_addresses_and_allows_the_rest() {
        let p = AddressPolicy::default_for("CADENZA_HTTP");
        for denied in [
            "127.0.0.1",
            "127.1.2.3",
            "::1",
            "169.254.169.254",
            "fe80::1",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "ff02::1",
            "255.255.255.255",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fd00:ec2::254",
            "100.100.100.200",
        ] {
            assert!(p.reason_to_deny(ip(denied)).is_some(), "{denied} allowed");
        }
        for allowed in [
            "10.1.2.3",
            "192.168.0.10",
            "172.16.5.4",
            "fd12::1",
            "93.184.216.34",
            "2606:2800::1",
        ] {
            assert_eq!(p.reason_to_deny(ip(allowed)), None, "{allowed} denied");
        }
    }

    #[test]
    fn allow_beats_the_default_and_an_explicit_deny_beats_allow() {
        let p = AddressPolicy::new(
            nets(&["127.0.0.1/32", "10.0.0.0/8"]),
            nets(&["10.9.0.0/16", "192.168.1.5"]),
            "CADENZA_ALARM",
        );
        assert_eq!(p.reason_to_deny(ip("127.0.0.1")), None);
        assert!(p.reason_to_deny(ip("127.0.0.2")).is_some());
        assert_eq!(p.reason_to_deny(ip("10.1.0.1")), None);
        assert_eq!(
            p.reason_to_deny(ip("10.9.3.4")),
            Some(DenyReason::Listed(parse_net("10.9.0.0/16").unwrap()))
        );
        assert!(p.reason_to_deny(ip("192.168.1.5")).is_some());
        assert_eq!(p.reason_to_deny(ip("192.168.1.6")), None);
    }

    #[test]
    fn messages_name_the_host_the_address_and_the_setting() {
        let p = AddressPolicy::new(Vec::new(), nets(&["10.9.0.0/16"]), "CADENZA_ALARM");
        assert_eq!(
            p.check("metadata.internal", ip("169.254.169.254"))
                .unwrap_err()
                .to_string(),
            "metadata.internal resolves to 169.254.169.254, a link-local address \
             (169.254.0.0/16), denied unless CADENZA_ALARM_ALLOW lists it"
        );
        assert_eq!(
            p.check("10.9.0.1", ip("10.9.0.1")).unwrap_err().to_string(),
            "address 10.9.0.1, which is denied by 10.9.0.0/16 in CADENZA_ALARM_DENY"
        );
    }

    #[test]
    fn urls_with_ip_hosts_are_checked_and_names_are_left_to_the_resolver() {
        let p = AddressPolicy::default_for("CADENZA_HTTP");
        for bad in [
            "http://127.0.0.1:8080/x",
            "http://[::1]/x",
            "http://2130706433/",
            "http://0x7f.1/",
            "https://169.254.169.254/latest/meta-data",
            "http://[::ffff:a9fe:a9fe]/",
        ] {
            assert!(p.check_url(&Url::parse(bad).unwrap()).is_err(), "{bad}");
        }
        assert!(p
            .check_url(&Url::parse("http://localhost/").unwrap())
            .is_ok());
        assert!(p
            .check_url(&Url::parse("http://10.0.0.1/").unwrap())
            .is_ok());
    }

    #[test]
    fn list_entries_parse_as_blocks_or_addresses() {
        assert_eq!(parse_net(" 10.0.0.0/8 ").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("10.1.2.3").unwrap().to_string(), "10.1.2.3/32");
        assert_eq!(parse_net("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_net("::1").unwrap().to_string(), "::1/128");
        assert_eq!(
            parse_net("10.0.0.0/33").unwrap_err(),
            "\"10.0.0.0/33\" is not an IP address or CIDR block (e.g. 10.0.0.0/8, 10.1.2.3, fd00::/8)"
        );
        assert!(parse_net("example.com").is_err());
        assert!(parse_net("").is_err());
        assert_eq!(parse_list("").unwrap(), NetList::default());
        assert_eq!(
            parse_list("10.0.0.0/8, ::1,").unwrap(),
            NetList(vec![
                parse_net("10.0.0.0/8").unwrap(),
                parse_net("::1").unwrap()
            ])
        );
        assert!(parse_list("10.0.0.0/8,intranet").is_err());
    }

    #[test]
    fn url_host_drops_path_query_and_credentials() {
        assert_eq!(
            url_host("https://user:pw@hooks.example.com/T0/B1/secret?token=abc"),
            "hooks.example.com"
        );
        assert_eq!(url_host("http://127.0.0.1:9000/x?k=v"), "127.0.0.1:9000");
        assert_eq!(url_host("not a url"), "<bad URL>");
    }

    /// Accepts one connection (if any comes within `wait`) and answers `response`.
    async fn server(response: &'static str) -> (u16, tokio::task::JoinHandle<bool>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            let accepted =
                tokio::time::timeout(std::time::Duration::from_millis(500), listener.accept())
                    .await;
            let Ok(Ok((mut sock, _))) = accepted else {
                return false;
            };
            let mut buf = [0u8; 4096];
            let _ = sock.read(&mut buf).await;
            let _ = sock.write_all(response.as_bytes()).await;
            let _ = sock.shutdown().await;
            true
        });
        (port, task)
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_to_denied_addresses_without_connecting() {
        let (port, server) = server("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
        let p = AddressPolicy::default_for("CADENZA_HTTP");
        let client = p.client_builder().build().unwrap();
        let e = client
            .get(format!("http://localhost:{port}/x?token=s3cret"))
            .send()
            .await
            .unwrap_err();
        let m = describe(&e);
        assert!(m.starts_with("localhost resolves to "), "{m}");
        assert!(m.contains("a loopback address"), "{m}");
        assert!(!m.contains("s3cret"), "{m}");
        assert!(
            !server.await.unwrap(),
            "the denied address was connected to"
        );
    }

    #[tokio::test]
    async fn the_client_reaches_allowed_names_and_refuses_redirects_to_denied_addresses() {
        let (port, server) = server(
            "HTTP/1.1 302 Found\r\nlocation: http://169.254.169.254/latest/meta-data\r\ncontent-length: 0\r\n\r\n",
        )
        .await;
        let p = AddressPolicy::new(nets(&["127.0.0.0/8", "::1"]), Vec::new(), "CADENZA_HTTP");
        let client = p
            .client_builder()
            .redirect(p.redirect_policy(10))
            .build()
            .unwrap();
        let e = client
            .get(format!("http://localhost:{port}/x"))
            .send()
            .await
            .unwrap_err();
        assert!(server.await.unwrap());
        assert_eq!(
            describe(&e),
            "redirect refused: address 169.254.169.254, a link-local address (169.254.0.0/16), \
             denied unless CADENZA_HTTP_ALLOW lists it"
        );
    }

    #[tokio::test]
    async fn failures_are_described_without_the_url() {
        let p = AddressPolicy::new(nets(&["127.0.0.1"]), Vec::new(), "CADENZA_HTTP");
        let client = p.client_builder().build().unwrap();
        // Nothing listens on port 1.
        let e = client
            .get("http://127.0.0.1:1/hook?token=s3cret")
            .send()
            .await
            .unwrap_err();
        let m = describe(&e);
        assert!(m.starts_with("cannot connect"), "{m}");
        assert!(!m.contains("s3cret") && !m.contains("/hook"), "{m}");
    }
}
