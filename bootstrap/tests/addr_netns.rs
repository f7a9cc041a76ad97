//! Address ownership in a real network namespace: ferrolb removes only addresses that
//! carry its IFA_PROTO mark, never an equal address someone else configured.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a test fails by panicking

mod common;

use std::net::IpAddr;

use common::veth_namespace;
use ferrolb_bootstrap::addr::{Addresses, Ensured};
use ferrolb_lab::netns::{Netns, TempNetns};

fn namespace(role: &str) -> TempNetns {
    veth_namespace(&format!("9{}-{role}", role.len()))
}

fn has(ns: &Netns, ip: &str) -> bool {
    ns.ip(&["-o", "addr", "show", "dev", "d0"]).unwrap().contains(&format!(" {ip}/"))
}

/// Runs `f` with an [`Addresses`] opened inside `ns`.
fn in_ns<T: Send + 'static>(
    ns: &Netns,
    f: impl FnOnce(Addresses) -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>> + Send + 'static,
) -> T {
    ns.run(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let a = Addresses::connect().unwrap();
            f(a).await
        })
    })
    .unwrap()
}

#[test]
fn a_foreign_address_of_the_same_value_is_never_removed() {
    let ns = namespace("foreign");
    ns.ip(&["addr", "add", "192.0.2.200/32", "dev", "d0"]).unwrap();
    let ip: IpAddr = "192.0.2.200".parse().unwrap();
    let (ensured, released) = in_ns(&ns, move |a| {
        Box::pin(async move { (a.ensure("d0", ip, 32).await.unwrap(), a.release("d0", ip).await.unwrap()) })
    });
    assert_eq!(ensured, Ensured::Foreign);
    assert!(!released);
    assert!(has(&ns, "192.0.2.200"), "the foreign address was removed");
}

#[test]
fn our_address_is_marked_added_once_and_removed() {
    let ns = namespace("ours");
    let v4: IpAddr = "192.0.2.201".parse().unwrap();
    let v6: IpAddr = "2001:db8::201".parse().unwrap();
    let (first, second, v6_added) = in_ns(&ns, move |a| {
        Box::pin(async move {
            (
                a.ensure("d0", v4, 32).await.unwrap(),
                a.ensure("d0", v4, 32).await.unwrap(),
                a.ensure("d0", v6, 128).await.unwrap(),
            )
        })
    });
    assert_eq!((first, second, v6_added), (Ensured::Added, Ensured::AlreadyOurs, Ensured::Added));
    assert!(has(&ns, "192.0.2.201") && has(&ns, "2001:db8::201"));
    // The IPv6 VIP is usable at once: no duplicate address detection, never tentative.
    let shown = ns.ip(&["-o", "-6", "addr", "show", "dev", "d0"]).unwrap();
    assert!(
        shown.contains("2001:db8::201/128") && shown.contains("nodad") && !shown.contains("tentative"),
        "{shown}"
    );
    // An address someone else adds later on the same interface stays.
    ns.ip(&["addr", "add", "192.0.2.202/32", "dev", "d0"]).unwrap();
    let other: IpAddr = "192.0.2.202".parse().unwrap();
    let (r4, r6, r_other) = in_ns(&ns, move |a| {
        Box::pin(async move {
            (
                a.release("d0", v4).await.unwrap(),
                a.release("d0", v6).await.unwrap(),
                a.release("d0", other).await.unwrap(),
            )
        })
    });
    assert_eq!((r4, r6, r_other), (true, true, false));
    assert!(!has(&ns, "192.0.2.201") && !has(&ns, "2001:db8::201"));
    assert!(has(&ns, "192.0.2.202"));
}

#[test]
fn the_default_interface_is_the_one_whose_subnet_holds_the_vip() {
    let ns = namespace("iface");
    ns.ip(&["addr", "add", "192.0.2.11/24", "dev", "d0"]).unwrap();
    let found = in_ns(&ns, |a| {
        Box::pin(async move {
            (
                a.interface_for("192.0.2.200".parse().unwrap()).await.unwrap(),
                a.interface_for("203.0.113.1".parse().unwrap()).await.unwrap(),
            )
        })
    });
    assert_eq!(found, (Some("d0".to_string()), None));
}
