//! Where things live in ZooKeeper: the cluster node `/hosts` and the host nodes under it, the
//! syncer's `/hosts-lock`, the node locks `/agent-locks/<name>` (kazoo's lock recipe, shared
//! with the original's agents), the semaphores `/agent-semaphores/<name>`, the registry of
//! this project's agents `/agent-registry/<host-id>`, role declarations `/roles/<role>` and
//! the persistent role locks `/role-locks/<role>`, and the top-level roots that belong to the agents and syncers
//! rather than to a repository. One place, so the agent, the syncer, `status` and `resume`
//! agree.

/// The cluster node: `version`, `synced`, `halt`; host nodes are its children.
pub(crate) const HOSTS: &str = "/hosts";
/// The host node property naming the agent that registered it (`zkdeployment <version>`);
/// a host node without it was registered by the original's agent (a mixed fleet).
pub(crate) const AGENT_PROPERTY: &str = "agent";
/// The syncer's lock.
pub(crate) const HOSTS_LOCK: &str = "/hosts-lock";
/// Where the node locks live.
pub(crate) const AGENT_LOCKS: &str = "/agent-locks";
/// Where the semaphores of rolling deploys live (`max-parallel` K > 1; kazoo's recipe).
pub(crate) const AGENT_SEMAPHORES: &str = "/agent-semaphores";
/// The registry of this project's agents: an ephemeral `/agent-registry/<host-id>` created
/// with the host node `/hosts/<host-id>`, in one transaction of the same session, so the two
/// go together (docs/design.md, "Exclusion", mixed fleets). The original's agents never create
/// one: `/hosts` having more children than this node means some host may be the original's.
pub(crate) const AGENT_REGISTRY: &str = "/agent-registry";
/// Where role controllers are declared.
pub(crate) const ROLES: &str = "/roles";
/// Where the persistent role locks live (created by operators).
pub(crate) const ROLE_LOCKS: &str = "/role-locks";
/// Where hosts that may not write `/hosts` record a halt (docs/security.md).
pub(crate) const HALTS: &str = "/hosts-halt";
/// The deployment index the syncer writes (docs/design.md, "The deployment index").
pub const DEPLOYMENT_INDEX: &str = "/deployment-index";
/// Per application node state that hosts record (CONTRACT 15): node halts and failure
/// records (`super::node_state`). Everyone may create under it, only the owner delete.
pub(crate) const NODE_STATE: &str = "/node-state";
/// Node pauses (`zkdeployment pause PATH`), one child per paused application node. Only the
/// operator's identity creates or deletes them.
pub(crate) const NODE_PAUSES: &str = "/node-pauses";

/// Top-level nodes that belong to ZooKeeper, the agents and the syncers: discovery never
/// walks them, a repository may not define them (`/role-locks` excepted in `.zkx` overlays,
/// where operators may create role lock nodes), and a sync never deletes them.
pub(crate) const RESERVED_ROOTS: [&str; 11] = [
    "/zookeeper",
    HOSTS,
    HOSTS_LOCK,
    AGENT_LOCKS,
    AGENT_SEMAPHORES,
    AGENT_REGISTRY,
    ROLE_LOCKS,
    HALTS,
    DEPLOYMENT_INDEX,
    NODE_STATE,
    NODE_PAUSES,
];

/// True if `name` (a top-level node name, without `/`) is one of [`RESERVED_ROOTS`].
pub(crate) fn is_reserved_root(name: &str) -> bool {
    RESERVED_ROOTS
        .iter()
        .any(|r| r.strip_prefix('/') == Some(name))
}

/// The `/hosts` property recording when the cluster version was last set to a new value
/// (`{"version": V, "time": T}`, written by `sync` and `resume`): where a roll-out starts.
pub const VERSION_SET: &str = "version-set";

/// The [`VERSION_SET`] record of `version`, set now.
pub fn version_set(version: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({"version": version, "time": crate::files::now()})
}

/// The host node property recording when the host last finished a pass successfully (Unix
/// time): with [`VERSION_SET`], `status` tells how long a version took to roll out.
pub const DEPLOYED_AT: &str = "deployed-at";

/// The host node property holding what the host has (`crate::agent::inventory`).
pub const INVENTORY: &str = "inventory";

/// The path of a host's node.
pub(crate) fn host_path(id: &str) -> String {
    format!("{HOSTS}/{id}")
}

/// The registry node of a host (see [`AGENT_REGISTRY`]).
pub(crate) fn registry_path(id: &str) -> String {
    format!("{AGENT_REGISTRY}/{id}")
}

/// The key of an application node in [`NODE_STATE`] and [`NODE_PAUSES`] (and the base of its
/// marker file names): the path without its leading `/`, `/` replaced by `,`, and `%` and `,`
/// inside names written `%25` and `%2C` (`/cust/a,b` → `cust,a%2Cb`). [`path_of_key`] reverses
/// it.
pub(crate) fn path_key(path: &str) -> String {
    path.trim_start_matches('/')
        .split('/')
        .map(|part| part.replace('%', "%25").replace(',', "%2C"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The application node path of a [`path_key`], if `key` is one.
pub(crate) fn path_of_key(key: &str) -> Option<String> {
    if key.is_empty() {
        return None;
    }
    let mut path = String::new();
    for part in key.split(',') {
        path.push('/');
        path.push_str(&unescape_part(part)?);
    }
    Some(path)
}

/// One `,`-separated part of a [`path_key`], its `%25` and `%2C` undone (nothing else may
/// follow a `%`); `None` if malformed or empty.
fn unescape_part(part: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = part;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        match rest.get(at + 1..at + 3) {
            Some("25") => out.push('%'),
            Some("2C") | Some("2c") => out.push(','),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    (!out.is_empty()).then_some(out)
}

/// The kazoo lock name of an application node: the path without its leading `/`, `/` → `,`.
pub(crate) fn lock_name(path: &str) -> String {
    path.trim_start_matches('/').replace('/', ",")
}

/// The node lock of an application node.
pub(crate) fn node_lock_path(path: &str) -> String {
    format!("{AGENT_LOCKS}/{}", lock_name(path))
}

/// The semaphore of an application node (rolling deploys with `max-parallel` K > 1).
pub(crate) fn semaphore_path(path: &str) -> String {
    format!("{AGENT_SEMAPHORES}/{}", lock_name(path))
}

/// The role lock node of a role.
pub(crate) fn role_lock_path(role: &str) -> String {
    format!("{ROLE_LOCKS}/{role}")
}

/// The declaration node of a role (its role controller).
pub(crate) fn role_path(role: &str) -> String {
    format!("{ROLES}/{role}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(host_path("h1"), "/hosts/h1");
        assert_eq!(registry_path("h1"), "/agent-registry/h1");
        assert!(is_reserved_root("agent-registry"));
        assert_eq!(node_lock_path("/cust/app"), "/agent-locks/cust,app");
        assert_eq!(role_lock_path("web"), "/role-locks/web");
        assert_eq!(role_path("web"), "/roles/web");
        assert!(is_reserved_root("hosts") && is_reserved_root("role-locks"));
        assert!(!is_reserved_root("acme") && !is_reserved_root("/hosts"));
        assert!(is_reserved_root("node-state") && is_reserved_root("node-pauses"));
        assert_eq!(path_key("/a,b/c%d"), "a%2Cb,c%25d");
        for path in ["/cust/someapp/cms", "/a,b/c%d", "/x.y/z", "/%2C"] {
            assert_eq!(path_of_key(&path_key(path)).as_deref(), Some(path));
        }
        for bad in ["", "a,,b", "a%ZZ", "%2"] {
            assert_eq!(path_of_key(bad), None, "{bad:?}");
        }
    }
}
