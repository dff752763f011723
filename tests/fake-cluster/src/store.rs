//! The object store: every object as JSON, one global resourceVersion counter, a bounded
//! history of watch events, owner references and garbage collection.

use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

use crate::error::{ApiError, ApiResult};
use crate::objects;
use crate::patch;
use crate::resources::{self, NAMESPACES, PODS, ResId, res};
use crate::selectors::{FieldSelector, LabelSelector};
use crate::util::{self, name_of, now_ns};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change, as kept in the watch history.
#[derive(Debug)]
pub struct WatchEvent {
    pub rv: u64,
    pub at: Instant,
    pub res: ResId,
    pub ns: String,
    pub kind: EventType,
    pub obj: Arc<Value>,
    pub old: Option<Arc<Value>>,
}

/// Options of a write.
#[derive(Debug, Clone, Default)]
pub struct WriteOpts {
    pub dry_run: bool,
    pub field_manager: Option<String>,
    /// The write goes to the `/status` subresource.
    pub status: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Strategic,
    Json,
    Apply { force: bool },
}

type Key = (String, String);

struct State {
    rv: u64,
    objects: Vec<BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<WatchEvent>>,
    /// Events with rv <= compacted are gone from the history.
    compacted: u64,
}

pub struct Store {
    state: Mutex<State>,
    tx: watch::Sender<u64>,
    /// The custom resources this cluster serves (its operators').
    pub custom: Vec<ResId>,
    history_limit: usize,
    /// Events older than this are dropped from the history (`--watch-expire-secs`).
    pub history_max_age: Mutex<Option<Duration>>,
    /// Pods are deleted gracefully (marked, then removed by the kubelet): the Docker kubelet.
    pub graceful_pods: std::sync::atomic::AtomicBool,
    /// Node objects exist and the scheduler binds pods; kubelets run only bound pods.
    pub scheduler: std::sync::atomic::AtomicBool,
    /// The operators whose mutating admission ([`crate::controllers::Operator::admit`]) every
    /// create goes through (set once, when the cluster starts).
    pub admission: std::sync::OnceLock<Vec<Arc<dyn crate::controllers::Operator>>>,
}

fn key(ns: &str, name: &str) -> Key {
    (ns.to_string(), name.to_string())
}

impl State {
    fn commit(
        &mut self,
        res_id: ResId,
        kind: EventType,
        mut obj: Value,
        old: Option<Arc<Value>>,
        history_limit: usize,
    ) -> Arc<Value> {
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let ns = util::ns_of(&obj).to_string();
        let name = name_of(&obj).to_string();
        let arc = Arc::new(obj);
        let map = &mut self.objects[res_id];
        if kind == EventType::Deleted {
            map.remove(&key(&ns, &name));
        } else {
            map.insert(key(&ns, &name), arc.clone());
        }
        self.history.push_back(Arc::new(WatchEvent {
            rv: self.rv,
            at: Instant::now(),
            res: res_id,
            ns,
            kind,
            obj: arc.clone(),
            old,
        }));
        while self.history.len() > history_limit {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
        arc
    }

    fn get(&self, res_id: ResId, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.objects[res_id].get(&key(ns, name))
    }

    fn all(&self) -> impl Iterator<Item = (ResId, &Arc<Value>)> {
        self.objects
            .iter()
            .enumerate()
            .flat_map(|(i, m)| m.values().map(move |v| (i, v)))
    }
}

/// Graceful deletion of a pod: `Some(marked pod)` when it must wait for its kubelet, `None`
/// to delete at once (grace 0, never scheduled, or already terminal).
fn pod_grace_mark(old: &Value, grace: Option<i64>) -> Option<Value> {
    let scheduled = util::s(old, "/spec/nodeName").is_some_and(|n| !n.is_empty());
    let terminal = matches!(util::s(old, "/status/phase"), Some("Succeeded" | "Failed"));
    let grace = grace
        .or_else(|| {
            old.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30)
        .max(0);
    if grace == 0 || !scheduled || terminal {
        return None;
    }
    let now = now_ns();
    let mut marked = old.clone();
    let deadline = now + grace * 1_000_000_000;
    let current = old
        .pointer("/metadata/deletionTimestamp")
        .and_then(Value::as_str)
        .and_then(util::parse_time);
    // A second delete may only shorten the grace period.
    if current.is_some_and(|c| c <= deadline) {
        return Some(marked);
    }
    marked["metadata"]["deletionTimestamp"] =
        json!(util::fmt_time(deadline - deadline % 1_000_000_000));
    marked["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
    Some(marked)
}

fn owner_uids(v: &Value) -> Vec<&str> {
    v.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str))
                .collect()
        })
        .unwrap_or_default()
}

fn finalizers(v: &Value) -> Vec<String> {
    v.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything except metadata and status: what bumps `generation`.
fn spec_part(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    c
}

fn without_rv(v: &Value) -> Value {
    let mut c = v.clone();
    if let Some(m) = c.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    c
}

impl Store {
    /// Whether this cluster serves resource `id` (built-in, or a custom one its operators
    /// serve).
    pub fn serves(&self, id: ResId) -> bool {
        !res(id).custom || self.custom.contains(&id)
    }

    pub fn new(custom: Vec<ResId>, history_limit: usize) -> Self {
        let (tx, _) = watch::channel(0);
        // One table per resource known now: the custom ones served are registered already.
        let tables = custom
            .iter()
            .map(|id| id + 1)
            .max()
            .unwrap_or(0)
            .max(resources::count());
        let store = Store {
            state: Mutex::new(State {
                rv: 0,
                objects: (0..tables).map(|_| BTreeMap::new()).collect(),
                history: VecDeque::new(),
                compacted: 0,
            }),
            tx,
            custom,
            history_limit: history_limit.max(16),
            history_max_age: Mutex::new(None),
            graceful_pods: std::sync::atomic::AtomicBool::new(false),
            scheduler: std::sync::atomic::AtomicBool::new(false),
            admission: std::sync::OnceLock::new(),
        };
        for ns in ["default", "kube-system", "kube-public"] {
            let _ = store.create(
                NAMESPACES,
                "",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                &WriteOpts::default(),
            );
        }
        let _ = store.create(
            resources::by_plural("serviceaccounts"),
            "default",
            json!({"metadata": {"name": "default"}}),
            &WriteOpts::default(),
        );
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn notify(&self, rv: u64) {
        self.tx.send_replace(rv);
    }

    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.tx.subscribe()
    }

    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    pub fn get(&self, res_id: ResId, ns: &str, name: &str) -> Option<Arc<Value>> {
        self.lock().get(res_id, ns, name).cloned()
    }

    pub fn get_by_uid(&self, uid: &str) -> Option<(ResId, Arc<Value>)> {
        self.lock()
            .all()
            .find(|(_, v)| util::uid_of(v) == uid)
            .map(|(r, v)| (r, v.clone()))
    }

    /// Objects of a type, optionally in one namespace, filtered; and the current resourceVersion.
    pub fn list(
        &self,
        res_id: ResId,
        ns: Option<&str>,
        ls: &LabelSelector,
        fs: &FieldSelector,
    ) -> (Vec<Arc<Value>>, u64) {
        let st = self.lock();
        let items = st.objects[res_id]
            .iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .filter(|(_, v)| ls.matches(v) && fs.matches(v))
            .map(|(_, v)| v.clone())
            .collect();
        (items, st.rv)
    }

    pub fn create(
        &self,
        res_id: ResId,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        // Mutating admission first (outside the lock: a webhook may read the store).
        if obj.is_object() {
            for op in self.admission.get().into_iter().flatten() {
                op.admit(self, res_id, ns, &mut obj)?;
            }
        }
        let mut st = self.lock();
        let out = self.create_locked(&mut st, res_id, ns, obj, opts)?;
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(out)
    }

    fn create_locked(
        &self,
        st: &mut State,
        res_id: ResId,
        ns: &str,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        let def = res(res_id);
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON or YAML object",
            ));
        }
        objects::check_type(def, &mut obj)?;
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        if def.namespaced {
            match util::s(&obj, "/metadata/namespace") {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => obj["metadata"]["namespace"] = json!(ns),
            }
            if st.get(NAMESPACES, "", ns).is_none() {
                return Err(ApiError::namespace_not_found(ns));
            }
        } else if let Some(m) = obj["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        if name_of(&obj).is_empty()
            && let Some(g) = util::s(&obj, "/metadata/generateName").filter(|g| !g.is_empty())
        {
            let mut name = format!("{g}{}", util::random_suffix());
            while st.get(res_id, ns, &name).is_some() {
                name = format!("{g}{}", util::random_suffix());
            }
            obj["metadata"]["name"] = json!(name);
        }
        objects::validate(def, &obj)?;
        let name = name_of(&obj).to_string();
        let ns_key = if def.namespaced { ns } else { "" };
        if st.get(res_id, ns_key, &name).is_some() {
            return Err(ApiError::already_exists(def, &name));
        }
        let uid = util::new_uid();
        let now = now_ns();
        {
            let m = obj["metadata"].as_object_mut().expect("metadata object");
            m.insert("uid".into(), json!(uid));
            m.insert("creationTimestamp".into(), json!(util::fmt_time(now)));
            m.remove("resourceVersion");
            m.remove("deletionTimestamp");
            m.remove("managedFields");
            if objects::has_generation(def) {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        objects::default_on_create(def, &mut obj, &uid);
        if let Some(fm) = &opts.field_manager {
            patch::record_update(&mut obj, None, fm, &util::fmt_time(now));
        }
        if opts.dry_run {
            obj["metadata"]["resourceVersion"] = json!("");
            return Ok(obj);
        }
        let arc = st.commit(res_id, EventType::Added, obj, None, self.history_limit);
        Ok((*arc).clone())
    }

    /// PUT (whole object, or its status with `opts.status`).
    pub fn update(
        &self,
        res_id: ResId,
        ns: &str,
        name: &str,
        obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        let mut st = self.lock();
        let def = res(res_id);
        let Some(old) = st.get(res_id, ns, name).cloned() else {
            return Err(ApiError::not_found(def, name));
        };
        let mut obj = obj;
        if !obj.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON or YAML object",
            ));
        }
        objects::check_type(def, &mut obj)?;
        let body_name = name_of(&obj);
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if let Some(rv) = util::s(&obj, "/metadata/resourceVersion").filter(|r| !r.is_empty())
            && Some(rv) != util::s(&old, "/metadata/resourceVersion")
        {
            return Err(ApiError::conflict(
                def,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let out = self.finish_update(&mut st, res_id, &old, obj, opts)?;
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(out)
    }

    fn finish_update(
        &self,
        st: &mut State,
        res_id: ResId,
        old: &Arc<Value>,
        mut obj: Value,
        opts: &WriteOpts,
    ) -> ApiResult<Value> {
        let def = res(res_id);
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        if opts.status {
            let mut n = (**old).clone();
            n["status"] = obj.get("status").cloned().unwrap_or_else(|| json!({}));
            obj = n;
        } else if def.status_sub {
            match old.get("status") {
                Some(s) => obj["status"] = s.clone(),
                None => {
                    if let Some(m) = obj.as_object_mut() {
                        m.remove("status");
                    }
                }
            }
        }
        for k in [
            "uid",
            "creationTimestamp",
            "namespace",
            "deletionTimestamp",
            "generation",
            "name",
        ] {
            match old["metadata"].get(k) {
                Some(v) => obj["metadata"][k] = v.clone(),
                None => {
                    if let Some(m) = obj["metadata"].as_object_mut() {
                        m.remove(k);
                    }
                }
            }
        }
        if obj["metadata"].get("managedFields").is_none()
            && let Some(mf) = old["metadata"].get("managedFields")
        {
            obj["metadata"]["managedFields"] = mf.clone();
        }
        if def.plural == "secrets"
            && let Some(Value::Object(sd)) =
                obj.as_object_mut().and_then(|o| o.remove("stringData"))
        {
            if !obj["data"].is_object() {
                obj["data"] = json!({});
            }
            for (k, v) in sd {
                obj["data"][k.as_str()] =
                    json!(util::base64(v.as_str().unwrap_or_default().as_bytes()));
            }
        }
        objects::default_on_update(def, &mut obj);
        objects::validate(def, &obj)?;
        if !opts.status {
            objects::check_immutable(def, old, &obj)?;
        }
        if objects::has_generation(def) && spec_part(&obj) != spec_part(old) {
            let g = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            obj["metadata"]["generation"] = json!(g + 1);
        }
        if let Some(fm) = &opts.field_manager {
            patch::record_update(&mut obj, Some(old), fm, &util::fmt_time(now_ns()));
        }
        obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
        if without_rv(&obj) == without_rv(old)
            && obj["metadata"].get("managedFields") == old["metadata"].get("managedFields")
        {
            return Ok((**old).clone());
        }
        if opts.dry_run {
            return Ok(obj);
        }
        let deleting = obj.pointer("/metadata/deletionTimestamp").is_some();
        if deleting && finalizers(&obj).is_empty() {
            let arc = st.commit(
                res_id,
                EventType::Deleted,
                obj,
                Some(old.clone()),
                self.history_limit,
            );
            return Ok((*arc).clone());
        }
        let arc = st.commit(
            res_id,
            EventType::Modified,
            obj,
            Some(old.clone()),
            self.history_limit,
        );
        Ok((*arc).clone())
    }

    /// PATCH. Returns the object and whether it was created (apply only).
    pub fn patch(
        &self,
        res_id: ResId,
        ns: &str,
        name: &str,
        kind: PatchKind,
        body: &Value,
        opts: &WriteOpts,
    ) -> ApiResult<(Value, bool)> {
        let def = res(res_id);
        let mut st = self.lock();
        let ns_key = if def.namespaced { ns } else { "" };
        let old = st.get(res_id, ns_key, name).cloned();
        let result = match (kind, old) {
            (PatchKind::Apply { force }, old) => {
                let Some(manager) = opts.field_manager.as_deref().filter(|m| !m.is_empty()) else {
                    return Err(ApiError::bad_request(
                        "PATCH, application/apply-patch+yaml requests must have a fieldManager",
                    ));
                };
                let mut applied = body.clone();
                if !applied.is_object() {
                    return Err(ApiError::bad_request(
                        "the body of an apply patch must be an object",
                    ));
                }
                for k in ["apiVersion", "kind"] {
                    if applied
                        .get(k)
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
                    {
                        return Err(ApiError::bad_request(format!(
                            "{k} must be set in an apply patch (Object '{}' is missing)",
                            if k == "kind" { "Kind" } else { "apiVersion" }
                        )));
                    }
                }
                objects::check_type(def, &mut applied)?;
                let body_name = name_of(&applied);
                if body_name.is_empty() {
                    applied["metadata"]["name"] = json!(name);
                } else if body_name != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({body_name}) does not match the name on the URL ({name})"
                    )));
                }
                if def.namespaced
                    && let Some(n) = util::s(&applied, "/metadata/namespace")
                        .filter(|n| !n.is_empty() && *n != ns)
                {
                    return Err(ApiError::bad_request(format!(
                        "the namespace of the object ({n}) does not match the namespace on the URL ({ns})"
                    )));
                }
                let time = util::fmt_time(now_ns());
                let merged = patch::apply(old.as_deref(), &applied, manager, force, &time)
                    .map_err(|msg| {
                        ApiError::new(409, "Conflict", msg).with_details(
                            json!({"name": name, "kind": def.plural, "group": def.group}),
                        )
                    })?;
                match old {
                    None => {
                        // A create by apply goes through mutating admission as a create does
                        // (Kueue's webhooks gate pods hvdctl applies), outside the lock: a
                        // webhook may read the store. Made meanwhile by someone else: applied
                        // to as an update instead.
                        let mut merged = merged;
                        if let Some(ops) = self.admission.get() {
                            drop(st);
                            for op in ops {
                                op.admit(self, res_id, ns, &mut merged)?;
                            }
                            st = self.lock();
                            if st.get(res_id, ns_key, name).is_some() {
                                drop(st);
                                return self.patch(res_id, ns, name, kind, body, opts);
                            }
                        }
                        let mf = merged["metadata"]["managedFields"].clone();
                        let created = self.create_locked(
                            &mut st,
                            res_id,
                            ns,
                            merged,
                            &WriteOpts {
                                field_manager: None,
                                ..opts.clone()
                            },
                        );
                        let mut created = created?;
                        if !opts.dry_run {
                            let n = name_of(&created).to_string();
                            let arc = st.get(res_id, ns_key, &n).cloned().expect("just created");
                            let mut with_mf = (*arc).clone();
                            with_mf["metadata"]["managedFields"] = mf;
                            let v = st.objects[res_id]
                                .get_mut(&key(ns_key, &n))
                                .expect("present");
                            *v = Arc::new(with_mf.clone());
                            created = with_mf;
                        } else {
                            created["metadata"]["managedFields"] = mf;
                        }
                        (created, true)
                    }
                    Some(old) => (
                        self.finish_update(
                            &mut st,
                            res_id,
                            &old,
                            merged,
                            &WriteOpts {
                                field_manager: None,
                                ..opts.clone()
                            },
                        )?,
                        false,
                    ),
                }
            }
            (_, None) => return Err(ApiError::not_found(def, name)),
            (kind, Some(old)) => {
                let mut target = (*old).clone();
                match kind {
                    PatchKind::Json => patch::json_patch(&mut target, body)
                        .map_err(|e| ApiError::new(422, "Invalid", e))?,
                    _ => {
                        if !body.is_object() {
                            return Err(ApiError::bad_request(
                                "a merge patch must be a JSON object",
                            ));
                        }
                        patch::merge_patch(&mut target, body)
                    }
                }
                if let Some(rv) = body
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    && Some(rv) != util::s(&old, "/metadata/resourceVersion")
                {
                    return Err(ApiError::conflict(
                        def,
                        name,
                        "the object has been modified; please apply your changes to the latest version and try again",
                    ));
                }
                (
                    self.finish_update(&mut st, res_id, &old, target, opts)?,
                    false,
                )
            }
        };
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(result)
    }

    /// DELETE. Returns the object (deleted or marked) and whether deletion is still pending.
    pub fn delete(
        &self,
        res_id: ResId,
        ns: &str,
        name: &str,
        policy: Option<&str>,
        preconditions: Option<&Value>,
        dry_run: bool,
    ) -> ApiResult<(Value, bool)> {
        self.delete_grace(res_id, ns, name, policy, preconditions, dry_run, None)
    }

    /// DELETE with DeleteOptions' `gracePeriodSeconds`. With graceful pod deletion on (the
    /// Docker kubelet), a scheduled, non-terminal pod is only marked (`deletionTimestamp` =
    /// now + grace, `deletionGracePeriodSeconds`); the kubelet removes it once its containers
    /// are stopped.
    #[allow(clippy::too_many_arguments)]
    pub fn delete_grace(
        &self,
        res_id: ResId,
        ns: &str,
        name: &str,
        policy: Option<&str>,
        preconditions: Option<&Value>,
        dry_run: bool,
        grace: Option<i64>,
    ) -> ApiResult<(Value, bool)> {
        let def = res(res_id);
        let mut st = self.lock();
        let ns_key = if def.namespaced { ns } else { "" };
        let Some(old) = st.get(res_id, ns_key, name).cloned() else {
            return Err(ApiError::not_found(def, name));
        };
        if let Some(p) = preconditions {
            if let Some(uid) = p.get("uid").and_then(Value::as_str)
                && uid != util::uid_of(&old)
            {
                return Err(ApiError::conflict(
                    def,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        util::uid_of(&old)
                    ),
                ));
            }
            if let Some(rv) = p.get("resourceVersion").and_then(Value::as_str)
                && Some(rv) != util::s(&old, "/metadata/resourceVersion")
            {
                return Err(ApiError::conflict(
                    def,
                    name,
                    "the object has been modified; please apply your changes to the latest version and try again",
                ));
            }
        }
        let policy = policy.unwrap_or(objects::default_propagation(def));
        if !matches!(policy, "Foreground" | "Background" | "Orphan") {
            return Err(ApiError::invalid(
                def,
                name,
                "propagationPolicy",
                "FieldValueNotSupported",
                &format!(
                    "Unsupported value: {policy:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                ),
            ));
        }
        if dry_run {
            return Ok(((*old).clone(), false));
        }
        let out = self.delete_locked(&mut st, res_id, &old, policy, grace);
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Ok(out)
    }

    fn delete_locked(
        &self,
        st: &mut State,
        res_id: ResId,
        old: &Arc<Value>,
        policy: &str,
        grace: Option<i64>,
    ) -> (Value, bool) {
        let uid = util::uid_of(old).to_string();
        if res_id == PODS
            && self
                .graceful_pods
                .load(std::sync::atomic::Ordering::Relaxed)
            && let Some(marked) = pod_grace_mark(old, grace)
        {
            if marked == **old {
                return (marked, false);
            }
            let arc = st.commit(
                res_id,
                EventType::Modified,
                marked,
                Some(old.clone()),
                self.history_limit,
            );
            return ((*arc).clone(), false);
        }
        if res_id == NAMESPACES {
            let ns = name_of(old).to_string();
            for r in 0..st.objects.len() {
                let keys: Vec<Key> = st.objects[r]
                    .keys()
                    .filter(|(n, _)| *n == ns)
                    .cloned()
                    .collect();
                for k in keys {
                    if let Some(o) = st.objects[r].get(&k).cloned() {
                        st.commit(
                            r,
                            EventType::Deleted,
                            (*o).clone(),
                            Some(o),
                            self.history_limit,
                        );
                    }
                }
            }
        }
        if policy == "Orphan" {
            self.orphan_dependents(st, &uid);
        }
        let mut fins = finalizers(old);
        if policy == "Foreground" && !fins.iter().any(|f| f == "foregroundDeletion") {
            fins.push("foregroundDeletion".into());
        }
        if fins.is_empty() {
            let arc = st.commit(
                res_id,
                EventType::Deleted,
                (**old).clone(),
                Some(old.clone()),
                self.history_limit,
            );
            return ((*arc).clone(), false);
        }
        let mut marked = (**old).clone();
        if marked.pointer("/metadata/deletionTimestamp").is_none() {
            marked["metadata"]["deletionTimestamp"] = json!(util::fmt_time(now_ns()));
            marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        }
        marked["metadata"]["finalizers"] = json!(fins);
        if marked == **old {
            return (marked, true);
        }
        let arc = st.commit(
            res_id,
            EventType::Modified,
            marked,
            Some(old.clone()),
            self.history_limit,
        );
        ((*arc).clone(), true)
    }

    fn orphan_dependents(&self, st: &mut State, uid: &str) {
        let deps: Vec<(ResId, Arc<Value>)> = st
            .all()
            .filter(|(_, v)| owner_uids(v).contains(&uid))
            .map(|(r, v)| (r, v.clone()))
            .collect();
        for (r, d) in deps {
            let mut n = (*d).clone();
            if let Some(refs) = n["metadata"]["ownerReferences"].as_array_mut() {
                refs.retain(|o| o.get("uid").and_then(Value::as_str) != Some(uid));
                if refs.is_empty()
                    && let Some(m) = n["metadata"].as_object_mut()
                {
                    m.remove("ownerReferences");
                }
            }
            st.commit(r, EventType::Modified, n, Some(d), self.history_limit);
        }
    }

    /// DELETE on a collection.
    pub fn delete_collection(
        &self,
        res_id: ResId,
        ns: Option<&str>,
        ls: &LabelSelector,
        fs: &FieldSelector,
        policy: Option<&str>,
        dry_run: bool,
    ) -> ApiResult<Vec<Value>> {
        let (items, _) = self.list(res_id, ns, ls, fs);
        let mut out = Vec::new();
        for it in items {
            match self.delete(
                res_id,
                util::ns_of(&it),
                name_of(&it),
                policy,
                None,
                dry_run,
            ) {
                Ok((v, _)) => out.push(v),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// Internal write: applies `f` to the stored object; commits when it changed.
    pub fn mutate(
        &self,
        res_id: ResId,
        ns: &str,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let mut st = self.lock();
        let old = st.get(res_id, ns, name).cloned()?;
        let mut n = (*old).clone();
        f(&mut n);
        if n == *old {
            return Some(n);
        }
        let arc = st.commit(
            res_id,
            EventType::Modified,
            n,
            Some(old),
            self.history_limit,
        );
        let rv = st.rv;
        drop(st);
        self.notify(rv);
        Some((*arc).clone())
    }

    /// A controller removes its finalizer `fin` from an object; one being deleted that keeps
    /// no finalizer is then gone, as when a client updates it so.
    pub fn drop_finalizer(&self, res_id: ResId, ns: &str, name: &str, fin: &str) {
        let mut st = self.lock();
        let Some(old) = st.get(res_id, ns, name).cloned() else {
            return;
        };
        let fins = finalizers(&old);
        if !fins.iter().any(|f| f == fin) {
            return;
        }
        let mut n = (*old).clone();
        let left: Vec<String> = fins.into_iter().filter(|f| f != fin).collect();
        let kind = if left.is_empty() {
            if let Some(m) = n["metadata"].as_object_mut() {
                m.remove("finalizers");
            }
            if n.pointer("/metadata/deletionTimestamp").is_some() {
                EventType::Deleted
            } else {
                EventType::Modified
            }
        } else {
            n["metadata"]["finalizers"] = json!(left);
            EventType::Modified
        };
        st.commit(res_id, kind, n, Some(old), self.history_limit);
        let rv = st.rv;
        drop(st);
        self.notify(rv);
    }

    /// The kubelet's final delete of a pod whose containers are stopped (grace 0), if the
    /// stored pod is still the one with `uid`.
    pub fn finish_pod_deletion(&self, ns: &str, name: &str, uid: &str) {
        let pre = json!({"uid": uid});
        let _ = self.delete_grace(PODS, ns, name, None, Some(&pre), false, Some(0));
    }

    /// Internal delete with a propagation policy; `None` when already gone.
    pub fn remove(&self, res_id: ResId, ns: &str, name: &str, policy: &str) -> Option<Value> {
        self.delete(res_id, ns, name, Some(policy), None, false)
            .ok()
            .map(|(v, _)| v)
    }

    /// Events after `rv` for one type (and namespace), or Err when `rv` is too old.
    pub fn events_after(
        &self,
        rv: u64,
        res_id: ResId,
        ns: Option<&str>,
    ) -> Result<Vec<Arc<WatchEvent>>, u64> {
        let mut st = self.lock();
        self.expire_history(&mut st);
        if rv < st.compacted {
            return Err(st.compacted);
        }
        let start = st.history.partition_point(|e| e.rv <= rv);
        Ok(st
            .history
            .iter()
            .skip(start)
            .filter(|e| e.res == res_id && ns.is_none_or(|n| n == e.ns))
            .cloned()
            .collect())
    }

    /// The oldest resourceVersion a watch can still start from.
    pub fn oldest_watchable(&self) -> u64 {
        let mut st = self.lock();
        self.expire_history(&mut st);
        st.compacted
    }

    fn expire_history(&self, st: &mut State) {
        let max_age = *self
            .history_max_age
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(age) = max_age {
            let now = Instant::now();
            while st
                .history
                .front()
                .is_some_and(|e| now.duration_since(e.at) > age)
            {
                if let Some(e) = st.history.pop_front() {
                    st.compacted = e.rv;
                }
            }
            // With nothing left in the history, even the current version is "old" once
            // enough time has passed since the last change.
            if st.history.is_empty() && st.compacted < st.rv {
                st.compacted = st.rv;
            }
        }
    }

    /// One garbage-collector pass. Returns true when it changed something.
    pub fn gc_pass(&self) -> bool {
        let mut st = self.lock();
        let before = st.rv;
        let uids: HashSet<String> = st.all().map(|(_, v)| util::uid_of(v).to_string()).collect();
        let mut orphans = Vec::new();
        let mut fg_owners = Vec::new();
        for (r, v) in st.all() {
            let owners = owner_uids(v);
            if !owners.is_empty() && owners.iter().all(|u| !uids.contains(*u)) {
                orphans.push((r, v.clone()));
            }
            if v.pointer("/metadata/deletionTimestamp").is_some()
                && finalizers(v).iter().any(|f| f == "foregroundDeletion")
            {
                fg_owners.push((r, v.clone()));
            }
        }
        for (r, v) in orphans {
            if let Some(cur) = st.get(r, util::ns_of(&v), name_of(&v)).cloned()
                && cur.pointer("/metadata/deletionTimestamp").is_none()
            {
                self.delete_locked(&mut st, r, &cur, "Background", None);
            }
        }
        for (r, owner) in fg_owners {
            let uid = util::uid_of(&owner).to_string();
            let deps: Vec<(ResId, Arc<Value>)> = st
                .all()
                .filter(|(_, v)| owner_uids(v).contains(&uid.as_str()))
                .map(|(r, v)| (r, v.clone()))
                .collect();
            if deps.is_empty() {
                let Some(cur) = st.get(r, util::ns_of(&owner), name_of(&owner)).cloned() else {
                    continue;
                };
                let mut n = (*cur).clone();
                let fins: Vec<String> = finalizers(&cur)
                    .into_iter()
                    .filter(|f| f != "foregroundDeletion")
                    .collect();
                if fins.is_empty() {
                    st.commit(r, EventType::Deleted, n, Some(cur), self.history_limit);
                } else {
                    n["metadata"]["finalizers"] = json!(fins);
                    st.commit(r, EventType::Modified, n, Some(cur), self.history_limit);
                }
            } else {
                for (dr, d) in deps {
                    if d.pointer("/metadata/deletionTimestamp").is_none() {
                        self.delete_locked(&mut st, dr, &d, "Foreground", None);
                    }
                }
            }
        }
        let changed = st.rv != before;
        let rv = st.rv;
        drop(st);
        if changed {
            self.notify(rv);
        }
        changed
    }

    /// Records (or aggregates) a core/v1 Event about `involved`.
    pub fn record_event(
        &self,
        involved: &Value,
        etype: &str,
        reason: &str,
        message: &str,
        component: &str,
    ) {
        let ns = util::ns_of(involved);
        let ns = if ns.is_empty() { "default" } else { ns };
        let uid = util::uid_of(involved);
        let now = now_ns();
        let ev_res = resources::EVENTS;
        let existing = {
            let st = self.lock();
            st.objects[ev_res]
                .iter()
                .find(|((n, _), v)| {
                    n == ns
                        && util::s(v, "/involvedObject/uid") == Some(uid)
                        && util::s(v, "/reason") == Some(reason)
                        && util::s(v, "/message") == Some(message)
                })
                .map(|(_, v)| name_of(v).to_string())
        };
        if let Some(name) = existing {
            self.mutate(ev_res, ns, &name, |e| {
                let c = e.get("count").and_then(Value::as_i64).unwrap_or(1);
                e["count"] = json!(c + 1);
                e["lastTimestamp"] = json!(util::fmt_time(now));
            });
            return;
        }
        let iname = name_of(involved);
        let hex: u64 = rand::random();
        let obj = json!({
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": format!("{iname}.{hex:016x}"), "namespace": ns},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion").cloned().unwrap_or(Value::Null),
                "kind": involved.get("kind").cloned().unwrap_or(Value::Null),
                "name": iname,
                "namespace": ns,
                "uid": uid,
                "resourceVersion": util::s(involved, "/metadata/resourceVersion").unwrap_or_default(),
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": component},
            "firstTimestamp": util::fmt_time(now),
            "lastTimestamp": util::fmt_time(now),
            "eventTime": null,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": "",
        });
        let _ = self.create(ev_res, ns, obj, &WriteOpts::default());
    }
}
