//! The sample workloads of `examples/demo/`, compiled into the binary so
//! `flotilla demo` works from any directory.

use crate::inputs::Input;

macro_rules! demo_files {
    ($($file:literal),* $(,)?) => {
        /// (file name, contents), in name order.
        pub const FILES: &[(&str, &str)] = &[
            $(($file, include_str!(concat!("../../examples/demo/", $file)))),*
        ];
    };
}

// Keep in sync with examples/demo/ (the test below checks).
demo_files!(
    "01-nodepools.yaml",
    "02-nodeclasses.yaml",
    "03-storage.yaml",
    "04-cluster.yaml",
    "05-daemonsets.yaml",
    "10-web.yaml",
    "11-api.yaml",
    "12-batch.yaml",
    "13-inference.yaml",
    "14-database.yaml",
    "15-legacy.yaml",
    "20-unschedulable.yaml",
);

pub fn sources() -> Vec<Input> {
    FILES
        .iter()
        .map(|(name, text)| Input {
            name: format!("examples/demo/{name}"),
            bytes: text.as_bytes().to_vec(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_list_matches_the_directory() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/demo");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .expect("examples/demo exists")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml") || n.ends_with(".yml") || n.ends_with(".json"))
            .collect();
        on_disk.sort();
        let embedded: Vec<String> = FILES.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            embedded, on_disk,
            "update demo_files! in cli/src/demo.rs to match examples/demo/"
        );
    }
}
