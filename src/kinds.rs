//! The Kubernetes kinds hvdctl creates, as typed objects. A kind is a Rust type implementing
//! [`Kind`] (k8s-openapi's for built-in kinds; a backend's own for its custom resource, e.g.
//! `backend::mpijob::MpiJob`); its [`KindDef`] is what parsing, applying and deleting need.
//! Rendered manifests are parsed into [`Object`]s through the kinds a backend declares (plus
//! [`BUILTIN`]), so a misspelt field is caught before anything reaches a cluster, and adding
//! a kind is a type and a line in its backend — nothing here changes.

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::any::Any;

pub use crate::types::{JobCondition, ROLE_LAUNCHER, ROLE_WORKER};

/// A kind hvdctl can create: a typed object with its API identity and metadata.
pub trait Kind:
    k8s_openapi::Resource
    + k8s_openapi::Metadata<Ty = ObjectMeta>
    + Serialize
    + DeserializeOwned
    + Clone
    + std::fmt::Debug
    + PartialEq
    + Send
    + Sync
    + 'static
{
    /// Creation order: what others refer to first (0: accounts, 1: secrets, 2: config,
    /// 3: services, 4: pods, 5: jobs, 6: an operator's job); deletion goes the other way.
    const ORDER: u8;

    /// The metadata of every pod template this object holds (a bare pod: its own), with the
    /// role of the pods made from it. hvdctl stamps its labels there.
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        Vec::new()
    }
}

impl Kind for ServiceAccount {
    const ORDER: u8 = 0;
}
impl Kind for Secret {
    const ORDER: u8 = 1;
}
impl Kind for ConfigMap {
    const ORDER: u8 = 2;
}
impl Kind for Service {
    const ORDER: u8 = 3;
}
/// `storage:` claims: made with the app, not a run (not in [`BUILTIN`]: no run owns one).
impl Kind for k8s_openapi::api::core::v1::PersistentVolumeClaim {
    const ORDER: u8 = 2;
}
impl Kind for Pod {
    const ORDER: u8 = 4;
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        vec![(ROLE_WORKER, &mut self.metadata)]
    }
}
impl Kind for StatefulSet {
    const ORDER: u8 = 4;
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        self.spec
            .as_mut()
            .map(|s| {
                (
                    ROLE_WORKER,
                    s.template.metadata.get_or_insert_with(Default::default),
                )
            })
            .into_iter()
            .collect()
    }
}
impl Kind for Job {
    const ORDER: u8 = 5;
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        self.spec
            .as_mut()
            .map(|s| {
                (
                    ROLE_LAUNCHER,
                    s.template.metadata.get_or_insert_with(Default::default),
                )
            })
            .into_iter()
            .collect()
    }
}

/// A kind as the API serves it: what discovery, list, delete and messages need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ApiKind {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// The plural resource name (`pods`, `mpijobs`).
    pub plural: &'static str,
}

impl ApiKind {
    /// The kind of a k8s-openapi type (or a backend's own): group, version and plural come
    /// from the type.
    pub const fn of<K: k8s_openapi::Resource>() -> ApiKind {
        ApiKind {
            api_version: K::API_VERSION,
            kind: K::KIND,
            plural: K::URL_PATH_SEGMENT,
        }
    }

    /// (group, version): `("", "v1")`, `("batch", "v1")`.
    pub fn group_version(&self) -> (&'static str, &'static str) {
        self.api_version
            .rsplit_once('/')
            .unwrap_or(("", self.api_version))
    }

    /// The API group (`""` for the core group).
    pub fn group(&self) -> &'static str {
        self.group_version().0
    }
}

impl std::fmt::Display for ApiKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.api_version, self.kind)
    }
}

/// A kind's entry in the registry: its API identity, creation order and parser.
#[derive(Clone, Copy)]
pub struct KindDef {
    pub api: ApiKind,
    /// See [`Kind::ORDER`].
    pub order: u8,
    parse: fn(&Value, &mut Vec<String>) -> crate::Result<Object>,
}

impl KindDef {
    pub const fn of<K: Kind>() -> KindDef {
        KindDef {
            api: ApiKind::of::<K>(),
            order: K::ORDER,
            parse: parse_as::<K>,
        }
    }
}

impl std::fmt::Debug for KindDef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.api)
    }
}

impl PartialEq for KindDef {
    fn eq(&self, other: &Self) -> bool {
        self.api == other.api
    }
}

/// The built-in kinds every backend's template may use.
pub const BUILTIN: &[KindDef] = &[
    KindDef::of::<ServiceAccount>(),
    KindDef::of::<Secret>(),
    KindDef::of::<ConfigMap>(),
    KindDef::of::<Service>(),
    KindDef::of::<Pod>(),
    KindDef::of::<StatefulSet>(),
    KindDef::of::<Job>(),
];

/// The kinds that only exist where an operator serves them (found by discovery).
pub fn is_custom(k: &ApiKind) -> bool {
    k.api_version.contains('.')
}

/// `spec.containers[0].name` for a serde_ignored path.
fn show_path(p: &serde_ignored::Path) -> String {
    use serde_ignored::Path as P;
    match p {
        P::Root => String::new(),
        P::Seq { parent, index } => format!("{}[{index}]", show_path(parent)),
        P::Map { parent, key } => {
            let head = show_path(parent);
            if head.is_empty() {
                key.clone()
            } else {
                format!("{head}.{key}")
            }
        }
        P::Some { parent } | P::NewtypeStruct { parent } | P::NewtypeVariant { parent } => {
            show_path(parent)
        }
    }
}

/// Parses `v` as `K`: fields the type does not know are collected in `unknown`; only a
/// failure pays for finding the path of the bad field.
fn parse_as<K: Kind>(v: &Value, unknown: &mut Vec<String>) -> crate::Result<Object> {
    let typed: K = serde_ignored::deserialize(v, |path| {
        let p = show_path(&path);
        // Types without apiVersion/kind fields (custom kinds) report them: they are known.
        if p != "apiVersion" && p != "kind" {
            unknown.push(p);
        }
    })
    .or_else(|_| {
        serde_path_to_error::deserialize(v).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            crate::Error::input(format!("{path}: {inner}")).caused_by(inner)
        })
    })?;
    Ok(Object::new(typed))
}

/// One object of a run, typed: any [`Kind`].
pub struct Object(Box<dyn AnyKind>);

/// [`Kind`] behind a pointer (what [`Object`] needs of its type).
trait AnyKind: std::fmt::Debug + Send + Sync {
    fn api_kind(&self) -> ApiKind;
    fn order(&self) -> u8;
    fn meta(&self) -> &ObjectMeta;
    fn meta_mut(&mut self) -> &mut ObjectMeta;
    fn body(&self) -> Value;
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)>;
    fn clone_box(&self) -> Box<dyn AnyKind>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

impl<K: Kind> AnyKind for K {
    fn api_kind(&self) -> ApiKind {
        ApiKind::of::<K>()
    }
    fn order(&self) -> u8 {
        K::ORDER
    }
    fn meta(&self) -> &ObjectMeta {
        self.metadata()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.metadata_mut()
    }
    fn body(&self) -> Value {
        // Typed objects have string keys and plain values: serializing them cannot fail.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
    fn pod_templates(&mut self) -> Vec<(&'static str, &mut ObjectMeta)> {
        Kind::pod_templates(self)
    }
    fn clone_box(&self) -> Box<dyn AnyKind> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

impl Clone for Object {
    fn clone(&self) -> Self {
        Object(self.0.clone_box())
    }
}

impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PartialEq for Object {
    fn eq(&self, other: &Self) -> bool {
        self.api_kind() == other.api_kind() && self.to_value() == other.to_value()
    }
}

impl Object {
    pub fn new<K: Kind>(k: K) -> Object {
        Object(Box::new(k))
    }

    /// The object as a `K`, if it is one.
    pub fn get<K: Kind>(&self) -> Option<&K> {
        self.0.as_any().downcast_ref()
    }

    pub fn get_mut<K: Kind>(&mut self) -> Option<&mut K> {
        self.0.as_any_mut().downcast_mut()
    }

    /// The object as a `K`, or itself back when it is another kind.
    pub fn into_kind<K: Kind>(self) -> Result<K, Object> {
        if self.get::<K>().is_none() {
            return Err(self);
        }
        Ok(*self
            .0
            .into_any()
            .downcast::<K>()
            .expect("the kind was just checked"))
    }

    /// Parses a manifest of one of `kinds`. Fields the types do not know are collected in
    /// `unknown` (as paths like `spec.containers.0.imagePullPolicyy`), not dropped silently.
    pub fn from_value(
        v: &Value,
        kinds: &[KindDef],
        unknown: &mut Vec<String>,
    ) -> crate::Result<Object> {
        let field = |f: &str| v.get(f).and_then(Value::as_str).unwrap_or_default();
        let (api_version, kind) = (field("apiVersion"), field("kind"));
        if api_version.is_empty() || kind.is_empty() {
            return Err(crate::Error::input(
                "every document needs apiVersion and kind",
            ));
        }
        match kinds
            .iter()
            .find(|k| k.api.api_version == api_version && k.api.kind == kind)
        {
            Some(def) => (def.parse)(v, unknown),
            None => {
                let known: Vec<String> = kinds.iter().map(|k| k.api.to_string()).collect();
                Err(crate::Error::input(format!(
                    "hvdctl does not create {api_version} {kind}; known kinds: {}",
                    known.join(", ")
                )))
            }
        }
    }

    /// The object as JSON, with apiVersion and kind first.
    pub fn to_value(&self) -> Value {
        let k = self.api_kind();
        let mut out = serde_json::Map::new();
        out.insert("apiVersion".into(), k.api_version.into());
        out.insert("kind".into(), k.kind.into());
        if let Value::Object(m) = self.0.body() {
            out.extend(m);
        }
        Value::Object(out)
    }

    /// The object's kind (apiVersion, kind, plural).
    pub fn api_kind(&self) -> ApiKind {
        self.0.api_kind()
    }

    /// See [`Kind::ORDER`].
    pub fn order(&self) -> u8 {
        self.0.order()
    }

    pub fn type_meta(&self) -> (&'static str, &'static str) {
        let k = self.api_kind();
        (k.api_version, k.kind)
    }

    pub fn kind(&self) -> &'static str {
        self.api_kind().kind
    }

    /// The plural resource name (`pods`, `mpijobs`).
    pub fn plural(&self) -> &'static str {
        self.api_kind().plural
    }

    pub fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }

    pub fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }

    pub fn name(&self) -> &str {
        self.meta().name.as_deref().unwrap_or_default()
    }

    /// Calls `f` with the metadata of every pod template (or pod) this object makes, and the
    /// role of those pods.
    pub fn for_each_pod_meta(&mut self, mut f: impl FnMut(&'static str, &mut ObjectMeta)) {
        for (role, m) in self.0.pod_templates() {
            f(role, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_of_any_kind_parse_stamp_and_come_back() {
        let v = serde_json::json!({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
        });
        let mut unknown = Vec::new();
        let mut o = Object::from_value(&v, BUILTIN, &mut unknown).unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        assert_eq!(o.api_kind(), ApiKind::of::<Job>());
        assert_eq!(o.order(), 5);
        let mut roles = Vec::new();
        o.for_each_pod_meta(|role, m| {
            roles.push(role);
            m.labels
                .get_or_insert_with(Default::default)
                .insert("x".into(), "y".into());
        });
        assert_eq!(roles, [ROLE_LAUNCHER]);
        assert_eq!(
            o.to_value()["spec"]["template"]["metadata"]["labels"]["x"],
            "y"
        );
        assert!(o.get::<Pod>().is_none());
        let job: Job = o.clone().into_kind().unwrap();
        assert_eq!(job.metadata.name.as_deref(), Some("j"));
        assert!(o.into_kind::<Pod>().is_err());
        // A kind outside the list given is refused, naming the list.
        let e = Object::from_value(&v, &BUILTIN[..2], &mut unknown)
            .unwrap_err()
            .message;
        assert!(e.contains("does not create batch/v1 Job"), "{e}");
        assert!(e.contains("v1 ServiceAccount, v1 Secret"), "{e}");
    }
}
