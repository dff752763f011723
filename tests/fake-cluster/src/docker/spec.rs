//! Pure translations of pod-spec fields into what Docker takes: quantities, env (with
//! `fieldRef`, `configMapKeyRef`, `secretKeyRef`, `envFrom`, `$(VAR)` expansion), the user,
//! and the `/etc/hosts` a pod sees.

use serde_json::Value;
use std::collections::BTreeMap;

use crate::util::s;

/// A memory quantity (`512Mi`, `1G`, `1e9`, `128974848`) in bytes, rounded up (the API
/// server's `Value`).
pub fn parse_bytes(q: &str) -> Option<i64> {
    let q = quantity::Quantity::parse(q).ok()?;
    i64::try_from(q.value()).ok()
}

/// A CPU quantity (`500m`, `2`, `0.5`) in nano-CPUs.
pub fn parse_nano_cpus(q: &str) -> Option<i64> {
    let q = quantity::Quantity::parse(q).ok()?;
    i64::try_from(q.nanos()).ok()
}

/// The quantity at `pointer` as a string (quantities may be JSON numbers).
pub fn quantity(v: &Value, pointer: &str) -> Option<String> {
    match v.pointer(pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Kubernetes' `$(VAR)` expansion: defined names are replaced, `$$` escapes, the rest is kept.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let b = input.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push('$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'('
                && let Some(end) = input[i + 2..].find(')')
            {
                let name = &input[i + 2..i + 2 + end];
                if let Some(v) = vars.get(name) {
                    out.push_str(v);
                    i += 3 + end;
                    continue;
                }
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// What a `fieldRef` reads.
pub struct PodFields<'a> {
    pub pod: &'a Value,
    pub ip: &'a str,
    pub host_ip: &'a str,
}

fn field_value(f: &PodFields, path: &str) -> Option<String> {
    let p = f.pod;
    Some(match path {
        "metadata.name" => s(p, "/metadata/name")?.to_string(),
        "metadata.namespace" => s(p, "/metadata/namespace")?.to_string(),
        "metadata.uid" => s(p, "/metadata/uid")?.to_string(),
        "spec.nodeName" => s(p, "/spec/nodeName").unwrap_or_default().to_string(),
        "spec.serviceAccountName" => s(p, "/spec/serviceAccountName")
            .unwrap_or("default")
            .to_string(),
        "status.podIP" | "status.podIPs" => f.ip.to_string(),
        "status.hostIP" | "status.hostIPs" => f.host_ip.to_string(),
        _ => {
            let (map, key) = if let Some(r) = path.strip_prefix("metadata.labels[") {
                ("labels", r)
            } else if let Some(r) = path.strip_prefix("metadata.annotations[") {
                ("annotations", r)
            } else {
                return None;
            };
            let key = key.trim_end_matches(']').trim_matches(['\'', '"']);
            p.pointer(&format!("/metadata/{map}"))?
                .get(key)?
                .as_str()?
                .to_string()
        }
    })
}

/// Looks a key up in a ConfigMap or Secret (decoded).
pub type KeyLookup<'a> = dyn Fn(&str, &str, &str) -> Option<Vec<u8>> + 'a;
/// All keys of a ConfigMap or Secret.
pub type AllLookup<'a> = dyn Fn(&str, &str) -> Option<Vec<(String, Vec<u8>)>> + 'a;

/// The container's environment, in order, `$(VAR)`-expanded; or the reason it cannot be
/// built (a missing ConfigMap/Secret key: `CreateContainerConfigError`).
pub fn env_of(
    c: &Value,
    f: &PodFields,
    key: &KeyLookup,
    all: &AllLookup,
) -> Result<Vec<(String, String)>, String> {
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let mut order: Vec<String> = Vec::new();
    let mut set = |vars: &mut BTreeMap<String, String>, k: String, v: String| {
        if !vars.contains_key(&k) {
            order.push(k.clone());
        }
        vars.insert(k, v);
    };
    for src in c
        .get("envFrom")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let prefix = s(src, "/prefix").unwrap_or_default();
        for (kind, ptr) in [("configmap", "/configMapRef"), ("secret", "/secretRef")] {
            let Some(r) = src.pointer(ptr) else { continue };
            let name = s(r, "/name").unwrap_or_default();
            let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
            match all(kind, name) {
                Some(kv) => {
                    for (k, v) in kv {
                        set(
                            &mut vars,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v).into_owned(),
                        );
                    }
                }
                None if optional => {}
                None => return Err(format!("{kind} \"{name}\" not found")),
            }
        }
    }
    for e in c.get("env").and_then(Value::as_array).into_iter().flatten() {
        let name = s(e, "/name").unwrap_or_default().to_string();
        let value = if let Some(v) = s(e, "/value") {
            expand(v, &vars)
        } else if let Some(path) = s(e, "/valueFrom/fieldRef/fieldPath") {
            field_value(f, path).unwrap_or_default()
        } else if let Some(r) = e.pointer("/valueFrom/configMapKeyRef") {
            lookup_key(key, "configmap", r)?
        } else if let Some(r) = e.pointer("/valueFrom/secretKeyRef") {
            lookup_key(key, "secret", r)?
        } else {
            String::new()
        };
        set(&mut vars, name, value);
    }
    Ok(order
        .into_iter()
        .map(|k| {
            let v = vars.get(&k).cloned().unwrap_or_default();
            (k, v)
        })
        .collect())
}

fn lookup_key(key: &KeyLookup, kind: &str, r: &Value) -> Result<String, String> {
    let name = s(r, "/name").unwrap_or_default();
    let k = s(r, "/key").unwrap_or_default();
    let optional = r.get("optional").and_then(Value::as_bool) == Some(true);
    match key(kind, name, k) {
        Some(v) => Ok(String::from_utf8_lossy(&v).into_owned()),
        None if optional => Ok(String::new()),
        None => Err(format!("couldn't find key {k} in {kind} {name}")),
    }
}

/// The effective `securityContext` field (container level over pod level).
pub fn sec_i64(pod: &Value, c: &Value, field: &str) -> Option<i64> {
    c.pointer(&format!("/securityContext/{field}"))
        .and_then(Value::as_i64)
        .or_else(|| {
            pod.pointer(&format!("/spec/securityContext/{field}"))
                .and_then(Value::as_i64)
        })
}

pub fn sec_bool(pod: &Value, c: &Value, field: &str) -> Option<bool> {
    c.pointer(&format!("/securityContext/{field}"))
        .and_then(Value::as_bool)
        .or_else(|| {
            pod.pointer(&format!("/spec/securityContext/{field}"))
                .and_then(Value::as_bool)
        })
}

/// Docker's `User` for the container given the image's configured user, or the
/// `CreateContainerConfigError` message when `runAsNonRoot` cannot hold.
pub fn user_of(
    pod: &Value,
    c: &Value,
    image_user: &str,
    pod_name: &str,
) -> Result<Option<String>, String> {
    let uid = sec_i64(pod, c, "runAsUser");
    let gid = sec_i64(pod, c, "runAsGroup");
    let cname = s(c, "/name").unwrap_or_default();
    if sec_bool(pod, c, "runAsNonRoot") == Some(true) {
        match uid {
            Some(0) => {
                return Err(format!(
                    "container's runAsUser breaks non-root policy (pod: \"{pod_name}\", container: {cname})"
                ));
            }
            Some(_) => {}
            None => {
                let u = image_user.split(':').next().unwrap_or_default();
                if u.is_empty() || u == "0" || u == "root" {
                    return Err(format!(
                        "container has runAsNonRoot and image will run as root (pod: \"{pod_name}\", container: {cname})"
                    ));
                }
                if u.parse::<u32>().is_err() {
                    return Err(format!(
                        "container has runAsNonRoot and image has non-numeric user ({u}), cannot verify user is non-root (pod: \"{pod_name}\", container: {cname})"
                    ));
                }
            }
        }
    }
    Ok(match (uid, gid) {
        (Some(u), Some(g)) => Some(format!("{u}:{g}")),
        (Some(u), None) => Some(u.to_string()),
        (None, Some(g)) => {
            let u = image_user.split(':').next().unwrap_or_default();
            Some(format!("{}:{g}", if u.is_empty() { "0" } else { u }))
        }
        (None, None) => None,
    })
}

/// One pod as the hosts files see it.
pub struct HostEntry {
    pub ns: String,
    pub ip: String,
    pub name: String,
    pub hostname: Option<String>,
    pub subdomain: Option<String>,
    pub labels: BTreeMap<String, String>,
}

/// A Service as the hosts files see it.
pub struct SvcEntry {
    pub ns: String,
    pub name: String,
    pub headless: bool,
    pub selector: BTreeMap<String, String>,
}

fn selects(sel: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    !sel.is_empty() && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
}

/// The `/etc/hosts` of pod `me`: the kubelet's own lines, then every pod DNS name the
/// cluster would resolve (`<host>.<subdomain>.<ns>.svc[.cluster.local]` for pods whose
/// subdomain names a headless Service selecting them) and every Service name (`<svc>`,
/// `<svc>.<ns>`, `<svc>.<ns>.svc[.cluster.local]`) → each selected pod's IP. Short forms
/// (`<host>.<subdomain>`, `<svc>`) only within the pod's own namespace, as the search path
/// would give them.
pub fn hosts_file(me: &HostEntry, pods: &[HostEntry], svcs: &[SvcEntry]) -> String {
    let mut out = String::from(
        "# Kubernetes-managed hosts file (fake-cluster).\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n",
    );
    let own_host = me.hostname.clone().unwrap_or_else(|| me.name.clone());
    match &me.subdomain {
        Some(sub) => out.push_str(&format!(
            "{}\t{own_host}.{sub}.{}.svc.cluster.local\t{own_host}\n",
            me.ip, me.ns
        )),
        None => out.push_str(&format!("{}\t{own_host}\n", me.ip)),
    }
    out.push_str("\n# Pods and Services (fake-cluster DNS).\n");
    for svc in svcs {
        let members: Vec<&HostEntry> = pods
            .iter()
            .filter(|p| p.ns == svc.ns && selects(&svc.selector, &p.labels))
            .collect();
        let same_ns = svc.ns == me.ns;
        for p in &members {
            let mut names = vec![
                format!("{}.{}.svc.cluster.local", svc.name, svc.ns),
                format!("{}.{}.svc", svc.name, svc.ns),
                format!("{}.{}", svc.name, svc.ns),
            ];
            if same_ns {
                names.push(svc.name.clone());
            }
            out.push_str(&format!("{}\t{}\n", p.ip, names.join(" ")));
        }
        if !svc.headless {
            continue;
        }
        for p in &members {
            let (Some(h), Some(sub)) = (&p.hostname, &p.subdomain) else {
                continue;
            };
            if *sub != svc.name {
                continue;
            }
            let mut names = vec![
                format!("{h}.{sub}.{}.svc.cluster.local", p.ns),
                format!("{h}.{sub}.{}.svc", p.ns),
                format!("{h}.{sub}.{}", p.ns),
            ];
            if same_ns {
                names.push(format!("{h}.{sub}"));
            }
            out.push_str(&format!("{}\t{}\n", p.ip, names.join(" ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(parse_bytes("64Mi"), Some(64 << 20));
        assert_eq!(parse_bytes("1G"), Some(1_000_000_000));
        assert_eq!(parse_bytes("1e3"), Some(1000));
        assert_eq!(parse_bytes("12x"), None);
        assert_eq!(parse_nano_cpus("500m"), Some(500_000_000));
        assert_eq!(parse_nano_cpus("2"), Some(2_000_000_000));
    }

    #[test]
    fn expansion() {
        let mut v = BTreeMap::new();
        v.insert("A".to_string(), "x".to_string());
        assert_eq!(expand("$(A)-$(B)-$$(A)-$", &v), "x-$(B)-$(A)-$");
    }
}
