//! placeholder
pub struct LaunchTemplateConfig;
pub fn template_name() {}
pub fn unused_templates() {}
