//! ferrolb controller: assigns LoadBalancer Service addresses from pools.
