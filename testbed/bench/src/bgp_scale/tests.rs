//! Shapes of the inputs and parsers of `bench bgp-scale` (no lab).
use super::feeds::bird_speaker_config;
use super::*;

#[test]
fn ferrolb_file_has_one_service_per_address() {
    let f = ferrolb_static_file(3);
    assert_eq!(f.matches("kind: Service\n").count(), 3);
    assert!(f.contains("name: bulk-2") && f.contains("{ip: \"198.18.0.2\"}"), "{f}");
    assert_eq!(ferrolb_static_file(0).matches("kind: Service\n").count(), 0);
}

#[test]
fn bird_speaker_exports_static_routes_from_the_include() {
    let spec = RouterSpec {
        neighbors: vec![addressing::ROUTER_V4.into()],
        ranges: Vec::new(),
        active: true,
        ..RouterSpec::default()
    };
    let c = bird_speaker_config(&routers::bird::config(&spec), Path::new("/x/routes.conf")).unwrap();
    assert_eq!(c.matches("export where source = RTS_STATIC;").count(), 1, "{c}");
    assert!(c.contains("\ninclude \"/x/routes.conf\";\n"), "{c}");
}

#[test]
fn route_count_leaves_the_total_out() {
    let text = "BIRD 2.0.12 ready.
1000 of 1000 routes for 1000 networks in table master4
0 of 0 routes for 0 networks in table master6
Total: 1000 of 1000 routes for 1000 networks in 2 tables
";
    assert_eq!(parse_route_count(text), 1000);
}

#[test]
fn systems_parse_by_name() {
    assert_eq!("BIRD".parse::<System>(), Ok(System::Bird));
    assert_eq!(" exabgp".parse::<System>(), Ok(System::Exabgp));
    assert!("frr".parse::<System>().is_err());
}
