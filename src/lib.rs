//! The engine behind `kopf`: a Rust core that watches, queues and processes
//! Kubernetes objects, and a thin PyO3 layer (feature `python`) that connects
//! it to the handlers written in Python.
