//! Network-namespace labs with real routers (BIRD 2, FRR, GoBGP, ExaBGP) and clients.
