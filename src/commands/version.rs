//! `hvdctl version`: the client's version and commit, and — when the cluster answers — its
//! version and the MPIJob versions it serves.

use super::block_on;
use crate::cli::{Global, ListFormat, VersionArgs};
use crate::engine::Env;
use crate::error::Result;
use crate::ui::Ui;
use serde::Serialize;

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Versions {
    client: &'static str,
    commit: &'static str,
    /// `null` when no cluster was asked or it did not answer.
    server: Option<String>,
    context: Option<String>,
    mpi_job_versions: Vec<String>,
    /// Why the server is not shown.
    server_error: Option<String>,
}

pub fn run(g: &Global, ui: &Ui, a: VersionArgs) -> Result<u8> {
    let mut v = Versions {
        client: env!("CARGO_PKG_VERSION"),
        commit: option_env!("HVDCTL_GIT_COMMIT").unwrap_or("unknown"),
        server: None,
        context: None,
        mpi_job_versions: vec![],
        server_error: None,
    };
    if !a.client {
        let env = Env::with_app(g, ui, None);
        let asked = block_on(async {
            let k = env.kube(None).await?;
            let c = &k.cluster;
            let info = c
                .client
                .apiserver_version()
                .await
                .map_err(|e| c.error("get /version", &e))?;
            let groups = c
                .client
                .list_api_groups()
                .await
                .map_err(|e| c.error("list API groups", &e))?;
            let mut mpi = Vec::new();
            for grp in groups.groups.iter().filter(|g| g.name == "kubeflow.org") {
                for gv in &grp.versions {
                    let res = c.client.list_api_group_resources(&gv.group_version).await;
                    if res.is_ok_and(|r| r.resources.iter().any(|r| r.name == "mpijobs")) {
                        mpi.push(gv.version.clone());
                    }
                }
            }
            Ok((info.git_version, c.context.clone(), mpi))
        });
        match asked {
            Ok((server, context, mpi)) => {
                v.server = Some(server);
                v.context = Some(context);
                v.mpi_job_versions = mpi;
            }
            Err(e) => v.server_error = Some(e.message),
        }
    }
    match a.output {
        ListFormat::Json => crate::out!("{}", crate::text::json(&v)?),
        ListFormat::Yaml => crate::out!("{}", crate::text::yaml(&v)?),
        ListFormat::Text => {
            crate::outln!("Client: hvdctl {} (commit {})", v.client, v.commit);
            if let (Some(s), Some(c)) = (&v.server, &v.context) {
                crate::outln!("Server: Kubernetes {s} (context {c})");
                if v.mpi_job_versions.is_empty() {
                    crate::outln!("MPIJob: not served (no MPI Operator)");
                } else {
                    crate::outln!("MPIJob: {}", v.mpi_job_versions.join(", "));
                }
            } else if let Some(e) = &v.server_error {
                crate::outln!("Server: not reached ({e})");
            }
        }
    }
    Ok(0)
}
