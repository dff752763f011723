//! Pod volumes on the host: ConfigMap/Secret files written with their modes (and kept
//! current), emptyDir (a host directory, or a tmpfs Docker volume for `medium: Memory`),
//! hostPath, and one Docker volume per PersistentVolumeClaim.

use bollard::models::{Mount, MountType};
use bollard::query_parameters::ListVolumesOptions;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{DockerKubelet, LABEL_POD_UID, PodH};
use crate::resources::{CONFIGMAPS, SECRETS};
use crate::store::Store;
use crate::util::{self, s};

/// A ConfigMap or Secret volume: where its files go and how.
#[derive(Debug, Clone)]
pub struct Projected {
    pub kind: &'static str,
    pub source: String,
    pub items: Option<Vec<(String, String, Option<u32>)>>,
    pub default_mode: u32,
    pub dir: PathBuf,
    pub fs_group: Option<u32>,
}

/// The decoded keys of a ConfigMap (`data` + `binaryData`) or Secret.
pub fn source_data(
    store: &Store,
    kind: &str,
    ns: &str,
    name: &str,
) -> Option<Vec<(String, Vec<u8>)>> {
    let (res, binary) = if kind == "secret" {
        (SECRETS, true)
    } else {
        (CONFIGMAPS, false)
    };
    let obj = store.get(res, ns, name)?;
    let mut out = Vec::new();
    if let Some(m) = obj.get("data").and_then(Value::as_object) {
        for (k, v) in m {
            let v = v.as_str().unwrap_or_default();
            let bytes = if binary {
                util::base64_decode(v).unwrap_or_default()
            } else {
                v.as_bytes().to_vec()
            };
            out.push((k.clone(), bytes));
        }
    }
    if !binary && let Some(m) = obj.get("binaryData").and_then(Value::as_object) {
        for (k, v) in m {
            out.push((
                k.clone(),
                util::base64_decode(v.as_str().unwrap_or_default()).unwrap_or_default(),
            ));
        }
    }
    Some(out)
}

fn mode_of(v: Option<&Value>) -> Option<u32> {
    v.and_then(Value::as_u64).map(|m| (m & 0o7777) as u32)
}

/// Brings a projected volume's files in line with its source: changed files are replaced
/// atomically (write + rename, visible in running containers), vanished ones removed.
pub fn write_projected(store: &Store, ns: &str, p: &Projected) -> io::Result<()> {
    let Some(data) = source_data(store, p.kind, ns, &p.source) else {
        return Ok(());
    };
    let data: BTreeMap<String, Vec<u8>> = data.into_iter().collect();
    let mut files: Vec<(String, Vec<u8>, u32)> = Vec::new();
    match &p.items {
        Some(items) => {
            for (key, path, mode) in items {
                if let Some(v) = data.get(key) {
                    files.push((path.clone(), v.clone(), mode.unwrap_or(p.default_mode)));
                }
            }
        }
        None => {
            for (k, v) in &data {
                files.push((k.clone(), v.clone(), p.default_mode));
            }
        }
    }
    let mut keep: Vec<PathBuf> = Vec::new();
    for (rel, content, mode) in files {
        if rel.split('/').any(|c| c == ".." || c.is_empty()) {
            continue;
        }
        let mode = match p.fs_group {
            // The kubelet gives the group read access to read-only volume files.
            Some(_) => mode | 0o440,
            None => mode,
        };
        let path = p.dir.join(&rel);
        keep.push(path.clone());
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let same = std::fs::read(&path).ok().as_deref() == Some(&content[..])
            && std::fs::metadata(&path)
                .map(|m| m.permissions().mode() & 0o7777 == mode)
                .unwrap_or(false);
        if same {
            continue;
        }
        let tmp = path.with_file_name(format!(
            ".{}.tmp",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        std::fs::write(&tmp, &content)?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
        if let Some(g) = p.fs_group {
            let _ = std::os::unix::fs::chown(&tmp, None, Some(g));
        }
        std::fs::rename(&tmp, &path)?;
    }
    remove_stale(&p.dir, &keep);
    Ok(())
}

fn remove_stale(dir: &Path, keep: &[PathBuf]) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let path = e.path();
        if path.is_dir() {
            if keep.iter().any(|k| k.starts_with(&path)) {
                remove_stale(&path, keep);
            } else {
                let _ = std::fs::remove_dir_all(&path);
            }
        } else if !keep.contains(&path) {
            let _ = std::fs::remove_file(&path);
        }
    }
}

/// The Docker volume of a claim.
pub fn claim_volume(k: &DockerKubelet, ns: &str, claim: &str) -> String {
    format!("fc-{}-pvc-{ns}-{claim}", k.id)
}

fn memory_volume(k: &DockerKubelet, h: &PodH, vol: &str) -> String {
    format!("fc-{}-{}-{vol}", k.id, &h.uid[..h.uid.len().min(8)])
}

/// Materialises every volume of the pod; returns its ConfigMap/Secret volumes.
pub async fn prepare(
    k: &DockerKubelet,
    store: &Arc<Store>,
    h: &PodH,
    pod: &Value,
) -> Result<Vec<Projected>, String> {
    let fs_group = pod
        .pointer("/spec/securityContext/fsGroup")
        .and_then(Value::as_u64)
        .map(|g| g as u32);
    let mut projected = Vec::new();
    for v in pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s(v, "/name").unwrap_or_default();
        let dir = h.dir.join("volumes").join(name);
        let fail = |e: String| format!("MountVolume.SetUp failed for volume \"{name}\" : {e}");
        let src = ["configMap", "secret"]
            .into_iter()
            .find_map(|kind| v.get(kind).map(|src| (kind, src)));
        if let Some((kind, src)) = src {
            let (kind, source) = if kind == "secret" {
                ("secret", s(src, "/secretName").unwrap_or_default())
            } else {
                ("configmap", s(src, "/name").unwrap_or_default())
            };
            let optional = src.get("optional").and_then(Value::as_bool) == Some(true);
            if source_data(store, kind, &h.ns, source).is_none() && !optional {
                return Err(fail(format!("{kind} \"{source}\" not found")));
            }
            let items = src.get("items").and_then(Value::as_array).map(|a| {
                a.iter()
                    .map(|i| {
                        (
                            s(i, "/key").unwrap_or_default().to_string(),
                            s(i, "/path").unwrap_or_default().to_string(),
                            mode_of(i.get("mode")),
                        )
                    })
                    .collect()
            });
            std::fs::create_dir_all(&dir).map_err(|e| fail(e.to_string()))?;
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755));
            let p = Projected {
                kind,
                source: source.to_string(),
                items,
                default_mode: mode_of(src.get("defaultMode")).unwrap_or(0o644),
                dir,
                fs_group,
            };
            write_projected(store, &h.ns, &p).map_err(|e| fail(e.to_string()))?;
            projected.push(p);
        } else if let Some(ed) = v.get("emptyDir") {
            if s(ed, "/medium") == Some("Memory") {
                let mut o = vec!["mode=1777".to_string()];
                if let Some(b) = super::spec::quantity(ed, "/sizeLimit")
                    .and_then(|q| super::spec::parse_bytes(&q))
                {
                    o.push(format!("size={b}"));
                }
                let opts = HashMap::from([
                    ("type".to_string(), "tmpfs".to_string()),
                    ("device".to_string(), "tmpfs".to_string()),
                    ("o".to_string(), o.join(",")),
                ]);
                let vname = memory_volume(k, h, name);
                k.create_volume_for_pod(&vname, opts, &h.uid)
                    .await
                    .map_err(fail)?;
            } else {
                std::fs::create_dir_all(&dir).map_err(|e| fail(e.to_string()))?;
                let mode = if fs_group.is_some() { 0o2777 } else { 0o777 };
                let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode));
                if let Some(g) = fs_group {
                    let _ = std::os::unix::fs::chown(&dir, None, Some(g));
                }
            }
        } else if let Some(hp) = v.get("hostPath") {
            let path = Path::new(s(hp, "/path").unwrap_or_default());
            match s(hp, "/type").unwrap_or_default() {
                "DirectoryOrCreate" => {
                    std::fs::create_dir_all(path).map_err(|e| fail(e.to_string()))?;
                }
                "FileOrCreate" if !path.exists() => {
                    if let Some(p) = path.parent() {
                        let _ = std::fs::create_dir_all(p);
                    }
                    std::fs::write(path, b"").map_err(|e| fail(e.to_string()))?;
                }
                "Directory" if !path.is_dir() => {
                    return Err(fail(format!(
                        "hostPath type check failed: {} is not a directory",
                        path.display()
                    )));
                }
                "File" if !path.is_file() => {
                    return Err(fail(format!(
                        "hostPath type check failed: {} is not a file",
                        path.display()
                    )));
                }
                _ => {}
            }
        } else if let Some(pvc) = v.get("persistentVolumeClaim") {
            let claim = s(pvc, "/claimName").unwrap_or_default();
            let Some(res) = crate::resources::find("", "v1", "persistentvolumeclaims", &[]) else {
                return Err(fail("PersistentVolumeClaims are not served".into()));
            };
            if store.get(res, &h.ns, claim).is_none() {
                return Err(fail(format!("persistentvolumeclaim \"{claim}\" not found")));
            }
            k.create_volume(
                &claim_volume(k, &h.ns, claim),
                HashMap::new(),
                Some(&format!("{}/{claim}", h.ns)),
            )
            .await
            .map_err(fail)?;
        }
    }
    Ok(projected)
}

/// The mounts of container `c`.
pub fn mounts(k: &DockerKubelet, h: &PodH, pod: &Value, c: &Value) -> Result<Vec<Mount>, String> {
    let vols: Vec<&Value> = pod
        .pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect();
    let mut out = Vec::new();
    for m in c
        .get("volumeMounts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = s(m, "/name").unwrap_or_default();
        let target = s(m, "/mountPath").unwrap_or_default().to_string();
        let sub = s(m, "/subPath").filter(|p| !p.is_empty());
        let mut ro = m.get("readOnly").and_then(Value::as_bool) == Some(true);
        let Some(v) = vols.iter().find(|v| s(v, "/name") == Some(name)) else {
            return Err(format!("volumeMount {name:?}: no such volume"));
        };
        let dir = h.dir.join("volumes").join(name);
        let (typ, source) = if v.get("configMap").is_some() || v.get("secret").is_some() {
            ro = true;
            (MountType::BIND, dir)
        } else if let Some(ed) = v.get("emptyDir") {
            if s(ed, "/medium") == Some("Memory") {
                if sub.is_some() {
                    return Err(format!(
                        "volume {name:?}: subPath of a memory emptyDir is not supported by fake-cluster"
                    ));
                }
                (MountType::VOLUME, PathBuf::from(memory_volume(k, h, name)))
            } else {
                (MountType::BIND, dir)
            }
        } else if let Some(hp) = v.get("hostPath") {
            (
                MountType::BIND,
                PathBuf::from(s(hp, "/path").unwrap_or_default()),
            )
        } else if let Some(pvc) = v.get("persistentVolumeClaim") {
            if sub.is_some() {
                return Err(format!(
                    "volume {name:?}: subPath of a claim is not supported by fake-cluster"
                ));
            }
            ro |= pvc.get("readOnly").and_then(Value::as_bool) == Some(true);
            (
                MountType::VOLUME,
                PathBuf::from(claim_volume(
                    k,
                    &h.ns,
                    s(pvc, "/claimName").unwrap_or_default(),
                )),
            )
        } else {
            return Err(format!(
                "volume {name:?}: this volume type is not supported by fake-cluster"
            ));
        };
        let source = match (typ, sub) {
            (MountType::BIND, Some(sp)) => {
                if sp.split('/').any(|c| c == "..") {
                    return Err(format!("subPath {sp:?} must not contain '..'"));
                }
                let p = source.join(sp);
                if !p.exists() {
                    let _ = std::fs::create_dir_all(&p);
                }
                p
            }
            _ => source,
        };
        out.push(Mount {
            target: Some(target),
            source: Some(source.to_string_lossy().into_owned()),
            typ: Some(typ),
            read_only: Some(ro),
            ..Default::default()
        });
    }
    Ok(out)
}

/// Removes the pod's own Docker volumes (memory emptyDirs).
pub async fn remove_pod_volumes(k: &DockerKubelet, h: &PodH) {
    let Ok(vs) = k
        .docker
        .list_volumes(Some(ListVolumesOptions {
            filters: DockerKubelet::filter(format!("{LABEL_POD_UID}={}", h.uid)),
        }))
        .await
    else {
        return;
    };
    for v in vs.volumes.unwrap_or_default() {
        k.remove_volume(&v.name).await;
    }
}
