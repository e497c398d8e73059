// Links libgpe.so. GPE_LIB_DIR names the directory that holds it (the Bazel-built
// library, or PREFIX/lib of `bazel run //c_api:install -- PREFIX`); without it the
// system linker path is searched.
fn main() {
    println!("cargo:rerun-if-env-changed=GPE_LIB_DIR");
    if let Ok(dir) = std::env::var("GPE_LIB_DIR") {
        println!("cargo:rustc-link-search=native={}", dir);
    }
    println!("cargo:rustc-link-lib=dylib=gpe");
}
