//! libipt's flow decoders for crates that cannot see this crate's
//! `retrace_libipt` build flag (benchmarks of other packages): `None` when
//! libipt-dev was missing at build time. Code comes from the files of a
//! process image's sections, through one image section cache.

use retrace_decoder::image::Image;

/// libipt's block decoder over a whole trace: (instructions, errors).
pub fn block_count(trace: &[u8], image: &Image, cpu: (u32, u32)) -> Option<(u64, u64)> {
    #[cfg(retrace_libipt)]
    return Some(crate::libipt::block_count(trace, &crate::bundles::image_file_sections(image), cpu));
    #[cfg(not(retrace_libipt))]
    {
        let _ = (trace, image, cpu);
        None
    }
}

/// libipt's instruction decoder over a whole trace: (instructions, errors).
pub fn insn_count(trace: &[u8], image: &Image, cpu: (u32, u32)) -> Option<(u64, u64)> {
    #[cfg(retrace_libipt)]
    return Some(crate::libipt::insn_count(trace, &crate::bundles::image_file_sections(image), cpu));
    #[cfg(not(retrace_libipt))]
    {
        let _ = (trace, image, cpu);
        None
    }
}
