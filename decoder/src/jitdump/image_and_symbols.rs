//! JIT code joined to the rest of the decoder: its bytes placed into an
//! [`Image`] (so the flow decoder can follow Intel PT through it) and its
//! names into a [`Symbolizer`].

use super::regions::CodeRegions;
use crate::image::Image;
use crate::symbols::Symbolizer;

impl CodeRegions<'_> {
    /// Adds the code of every region visible at `time` (see
    /// [`CodeRegions::visible_at`]) to `image` as a raw section named after
    /// the function, so that the flow decoder can follow PT through JIT code.
    /// Empty functions are left out. Returns the number of sections added.
    pub fn add_to_image(&self, image: &mut Image, time: Option<u64>) -> usize {
        let mut added = 0;
        for (address, region) in self.visible_at(time) {
            if !region.code.is_empty() {
                image.add_raw(&region.name_lossy(), address, region.code.to_vec());
                added += 1;
            }
        }
        added
    }

    /// Names the code of every region visible at `time` in `symbolizer`
    /// ([`Symbolizer::add_jit_function`]): `module` is what its context line
    /// shows as the module (e.g. the dump's file name), the JIT name is the
    /// function. Returns the number of functions added.
    pub fn add_to_symbolizer(&self, symbolizer: &mut Symbolizer, module: &str, time: Option<u64>) -> usize {
        let mut added = 0;
        for (address, region) in self.visible_at(time) {
            if !region.code.is_empty() {
                symbolizer.add_jit_function(module, &region.name_lossy(), address, region.size());
                added += 1;
            }
        }
        added
    }
}
