"""`kubectl hami`: the kubectl plugin (console script `kubectl-hami`): per-GPU allocation and use as
`kubectl top` shows CPU, and hami's doctor and what-if tools, on the current kubeconfig context."""
