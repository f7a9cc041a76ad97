//! The YAML clusters tests share, in the static-file format: a speaker reads them as
//! its file, [`crate::kubeapi::apply_stream`] puts them on an apiserver.

/// The pool `public`, 203.0.113.0/24 (a literal, for `concat!`).
macro_rules! public_pool {
    () => {
        r#"apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: public}
spec: {addresses: [203.0.113.0/24]}
"#
    };
}

/// Node node1 on rack a, Ready, 192.0.2.11 (a literal, for `concat!`).
macro_rules! node1_rack_a {
    () => {
        r#"apiVersion: v1
kind: Node
metadata: {name: node1, labels: {rack: a}}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.11}]
"#
    };
}

/// node1 with a Local Service `shop` whose only endpoint (pod `shop-0` on node1) waits
/// for its readiness gate, the pool `public` (203.0.113.0/24), the BGPPeer `router-a`
/// (AS 64513 → 64512 at 192.0.2.1) and a BGPAdvertisement of `public`: the readiness
/// gate's cluster.
pub const SHOP: &str = concat!(
    r#"
apiVersion: v1
kind: Node
metadata: {name: node1}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.11}]
---
apiVersion: v1
kind: Service
metadata: {name: shop, namespace: default}
spec: {type: LoadBalancer, externalTrafficPolicy: Local, selector: {app: shop}}
status: {loadBalancer: {ingress: [{ip: 203.0.113.20}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: shop-1, namespace: default, labels: {kubernetes.io/service-name: shop}}
addressType: IPv4
endpoints:
- addresses: [10.0.0.5]
  nodeName: node1
  conditions: {ready: false, serving: false}
  targetRef: {kind: Pod, name: shop-0, namespace: default}
---
"#,
    public_pool!(),
    r#"---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: public}
spec: {ipAddressPools: [public]}
"#
);

/// Two Ready nodes (racks a and b), a Cluster Service `web` (203.0.113.10) and a Local
/// Service `local` (203.0.113.20, one ready endpoint on node1), the pool `public`, the
/// BGPPeer `router-a` with the BFDProfile `fast`, a BGPAdvertisement with community
/// 64512:100, and an L2Advertisement whose node selector matches no node.
pub const TWO_RACKS: &str = concat!(
    "\n",
    node1_rack_a!(),
    r#"---
apiVersion: v1
kind: Node
metadata: {name: node2, labels: {rack: b}}
status:
  conditions: [{type: Ready, status: "True"}]
  addresses: [{type: InternalIP, address: 192.0.2.12}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, labels: {app: web}}
spec: {type: LoadBalancer, ports: [{port: 80, protocol: TCP}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}]}}
---
apiVersion: v1
kind: Service
metadata: {name: local, namespace: default}
spec: {type: LoadBalancer, externalTrafficPolicy: Local, ports: [{port: 53, protocol: UDP}]}
status: {loadBalancer: {ingress: [{ip: 203.0.113.20}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: local-a, namespace: default, labels: {kubernetes.io/service-name: local}}
addressType: IPv4
endpoints:
- {addresses: [10.0.0.1], nodeName: node1, conditions: {ready: true}}
---
"#,
    public_pool!(),
    r#"---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1, bfdProfile: fast}
---
apiVersion: ferrolb.io/v1alpha1
kind: BFDProfile
metadata: {name: fast}
spec: {receiveInterval: 300ms}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: public}
spec: {ipAddressPools: [public], communities: ["64512:100"]}
---
apiVersion: ferrolb.io/v1alpha1
kind: L2Advertisement
metadata: {name: lan}
spec: {ipAddressPools: [public], nodeSelectors: [{matchLabels: {rack: none}}]}
"#
);

/// The planner's cluster: two nodes (node2 on rack b), a dual-stack Cluster Service
/// `web`, a Local Service `local` with a terminating-but-serving endpoint on node1, a
/// Service of another class, the pools `public` (203.0.113.0/24, 2001:db8:3::/120) and
/// `lan`, an eBGP and an iBGP peer, a BGPAdvertisement with communities and an
/// L2Advertisement on eth0.
pub const PLANNER: &str = concat!(
    "\n",
    node1_rack_a!(),
    r#"---
apiVersion: v1
kind: Node
metadata: {name: node2, labels: {rack: b}}
status:
  conditions: [{type: Ready, status: "True"}, {type: NetworkUnavailable, status: "False"}]
  addresses: [{type: InternalIP, address: 192.0.2.12}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default, labels: {app: web}}
spec:
  type: LoadBalancer
  ports: [{port: 80, protocol: TCP}]
status: {loadBalancer: {ingress: [{ip: 203.0.113.10}, {ip: "2001:db8:3::10"}]}}
---
apiVersion: v1
kind: Service
metadata: {name: local, namespace: default}
spec:
  type: LoadBalancer
  externalTrafficPolicy: Local
  ports: [{port: 53, protocol: UDP}]
status: {loadBalancer: {ingress: [{ip: 203.0.113.20}]}}
---
apiVersion: v1
kind: Service
metadata: {name: other-class, namespace: default}
spec: {type: LoadBalancer, loadBalancerClass: example.com/other}
status: {loadBalancer: {ingress: [{ip: 203.0.113.30}]}}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: local-abc, namespace: default, labels: {kubernetes.io/service-name: local}}
addressType: IPv4
endpoints:
- {addresses: [10.0.0.1], nodeName: node2, conditions: {ready: true}}
- {addresses: [10.0.0.2], nodeName: node1, conditions: {ready: false, serving: true, terminating: true}}
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: public}
spec: {addresses: [203.0.113.0/24, "2001:db8:3::/120"]}
---
apiVersion: ferrolb.io/v1alpha1
kind: IPAddressPool
metadata: {name: lan}
spec: {addresses: [192.0.2.200-192.0.2.250]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-a}
spec: {myASN: 64513, peerASN: 64512, peerAddress: 192.0.2.1}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPPeer
metadata: {name: router-ibgp}
spec: {myASN: 64512, peerASN: 64512, peerAddress: 192.0.2.2, nodeSelectors: [{matchLabels: {rack: a}}]}
---
apiVersion: ferrolb.io/v1alpha1
kind: BGPAdvertisement
metadata: {name: public}
spec:
  ipAddressPools: [public]
  localPref: 150
  communities: ["64512:100", "large:64512:1:2"]
---
apiVersion: ferrolb.io/v1alpha1
kind: L2Advertisement
metadata: {name: lan}
spec: {ipAddressPools: [lan], interfaces: [eth0]}
"#
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixtures_parse() {
        for text in [SHOP, TWO_RACKS, PLANNER] {
            let stream = ferrolb_api::parse_stream("fixture.yaml", text);
            assert!(stream.is_ok_and(|s| s.objects.len() >= 6), "{text}");
        }
    }
}
