"""The `sarathi-sim` command line: one module per command group (`main` holds the app and the
sweep/simulate commands). Modules here parse options and print; the work lives in
`experiments.planning`, `experiments.verification`, `experiments.point` and the core packages."""
