//! placeholder
pub struct UserDataInput;
pub fn generate_user_data() {}
