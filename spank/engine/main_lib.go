//go:build !gpubind_launcher

package main

// Built as the c-shared engine library (gpubind_engine.so), which srun, sbatch and salloc
// load to check the option and print help; main never runs. Built with the tag
// gpubind_launcher, the same package is the program gpubind-launcher (launcher.go).
func main() {}
