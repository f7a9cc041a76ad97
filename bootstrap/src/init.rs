//! `checkpoint init`: a first checkpoint from flags or a file of objects, and the
//! refresh credentials; needs no apiserver.

use std::path::{Path, PathBuf};

use anyhow::{Context, anyhow};
use ferrolb_api::{
    BgpPeer, BgpPeerSpec, Config, ControlPlaneVip, ControlPlaneVipBgp, ControlPlaneVipMember,
    ControlPlaneVipSpec, VipMode,
};
use ferrolb_bootstrap::{checkpoint, credentials};

use crate::cli::InitArgs;

fn split_pair<'a>(flag: &str, s: &'a str) -> anyhow::Result<(&'a str, &'a str)> {
    s.split_once('=').ok_or_else(|| anyhow!("--{flag} {s:?}: write NAME=ADDRESS"))
}

pub(crate) fn init(a: InitArgs) -> anyhow::Result<()> {
    let file = a.checkpoint.display().to_string();
    let config = match &a.from {
        Some(from) => {
            let stream = ferrolb_api::read_stream(from).map_err(|e| anyhow!(checkpoint::one_line(&e)))?;
            let config = stream.config();
            let name = if config.control_plane_vips.len() == 1 {
                kube::ResourceExt::name_any(&config.control_plane_vips[0])
            } else {
                a.name.clone()
            };
            config
                .for_control_plane_vip(&name)
                .ok_or_else(|| anyhow!("{}: no ControlPlaneVIP {name:?}; pass --name", from.display()))?
        }
        None => {
            let address = a.address.clone().unwrap_or_default();
            let mut spec = ControlPlaneVipSpec::new(address);
            spec.port = a.port;
            spec.mode = if a.mode == "BGP" { VipMode::Bgp } else { VipMode::L2 };
            spec.interface = a.interface.clone();
            if let Some(f) = &a.membership_key_file {
                spec.membership_key_file = f.clone();
            }
            if let Some(p) = a.membership_port {
                spec.membership_port = p;
            }
            for m in &a.members {
                let (name, address) = split_pair("member", m)?;
                spec.members.push(ControlPlaneVipMember { name: name.into(), address: address.into() });
            }
            if let Some(u) = &a.health_url {
                spec.health_check.url = u.clone();
            }
            spec.health_check.ca_file = a.ca_file.display().to_string();
            let mut config = Config::default();
            if !a.peers.is_empty() || spec.mode == VipMode::Bgp {
                let mut names = Vec::new();
                for p in &a.peers {
                    let (name, address) = split_pair("bgp-peer", p)?;
                    names.push(name.to_string());
                    config.peers.push(BgpPeer::new(name, BgpPeerSpec::new(a.my_asn, a.peer_asn, address)));
                }
                spec.bgp = Some(ControlPlaneVipBgp { peers: names, communities: a.communities.clone() });
            }
            config.control_plane_vips.push(ControlPlaneVip::new(&a.name, spec));
            config
        }
    };
    let name = kube::ResourceExt::name_any(&config.control_plane_vips[0]);
    let text = checkpoint::render(&config, &name).map_err(|e| anyhow!("{file}: {e}"))?;
    let stream = ferrolb_api::parse_stream(&file, &text).map_err(|e| anyhow!(checkpoint::one_line(&e)))?;
    checkpoint::from_stream(&file, stream).map_err(|e| anyhow!(e))?;
    if let Some(dir) = a.checkpoint.parent() {
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
    }
    checkpoint::write(&a.checkpoint, &text)?;
    eprintln!("wrote {file}");
    if !a.no_credentials {
        let node = a.node_name.clone().ok_or_else(|| {
            anyhow!("--node-name is needed for the refresh credentials (or pass --no-credentials)")
        })?;
        let req = credentials::Request {
            node,
            ca_cert: a.ca_file.clone(),
            ca_key: a.ca_key.clone(),
            dir: a.checkpoint.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from(".")),
            server: a.server.clone(),
            tls_server_name: a.apiserver_tls_name.clone(),
            days: 365,
        };
        let w = credentials::write(&req)?;
        eprintln!(
            "wrote {} (apply `ferrolb-bootstrap checkpoint rbac` once per cluster)",
            w.kubeconfig.display()
        );
    }
    Ok(())
}
