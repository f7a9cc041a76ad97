//! What a killed test or cluster server leaves: the lab's namespaces (the lab removes
//! those) and, for a real node, mounts, cgroups and shim sockets beside them.

use std::path::Path;

use ferrolb_lab::{BASE_DIR, Error, lab};

use crate::containerd::{remove_cgroups, remove_shim_sockets, unmount_under};

/// Removes leftover labs — all of ours (`all`), or only those whose owning process is
/// gone — with what their real nodes left, and gives back host settings no kubelet
/// holds any more. Returns the namespaces removed.
pub fn remove_leftovers(all: bool) -> Result<Vec<String>, Error> {
    let removed = lab::remove_leftovers(all)?;
    for name in &removed {
        remove_real_node_leftovers(name);
    }
    crate::node::host::release_stale()?;
    Ok(removed)
}

/// What a real node ([`crate::node`]) of namespace `name` leaves when its owner was
/// killed: mounts under its lab directory and its cgroups (named after the namespace).
/// Its processes died with the namespace.
pub fn remove_real_node_leftovers(name: &str) {
    if let Some((id, node)) = name.split_once('-') {
        let lab_dir = Path::new(BASE_DIR).join(id);
        remove_shim_sockets(&lab_dir.join("cluster").join(format!("kubelet-{node}")).join("containerd"));
        unmount_under(&lab_dir);
    }
    remove_cgroups(name);
}
