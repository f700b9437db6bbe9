#!/usr/bin/env python3
# Writes the board fixture trees under platforms/testdata/ (run from anywhere;
# it replaces every tree). The file shapes are the boards' kernels': NUL-
# terminated device-tree strings, /proc/cpuinfo as each architecture's kernel
# prints it (CPU part per core on ARM, physical/core ids on x86), cpu_capacity
# as the scheduler normalises it (largest core 1024), /etc/nv_tegra_release of
# L4T R35/R36; the sysfs sensor parts are copied from pkg/power/testdata.
# Values (serials, memory sizes) are illustrative, never measured.
import os, shutil
T=os.path.dirname(os.path.abspath(__file__))
P=os.path.join(T,'..','..','pkg','power','testdata')
def w(board, rel, content, mode='w'):
    p=os.path.join(T,board,rel); os.makedirs(os.path.dirname(p),exist_ok=True)
    with open(p, 'wb') as f: f.write(content.encode() if isinstance(content,str) else content)
def dt(board, model, compat):
    w(board,'proc/device-tree/model', model+'\0')
    w(board,'proc/device-tree/compatible', ''.join(c+'\0' for c in compat))
def copysys(board, src):
    shutil.copytree(os.path.join(P,src,'sys'), os.path.join(T,board,'sys'), dirs_exist_ok=True, symlinks=True)
def meminfo(board, total_kb, avail_kb):
    w(board,'proc/meminfo', f"MemTotal:       {total_kb} kB\nMemFree:        {avail_kb//2} kB\nMemAvailable:   {avail_kb} kB\nBuffers:           12345 kB\nCached:          {avail_kb//3} kB\nSwapTotal:             0 kB\n")
ARMFEAT='fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp'
def armcpu(parts, features=ARMFEAT, variants=None, tail='', impl='0x41'):
    out=''
    for i,p in enumerate(parts):
        v=(variants or {}).get(p,'0x1')
        out+=f"processor\t: {i}\nBogoMIPS\t: 48.00\nFeatures\t: {features}\nCPU implementer\t: {impl}\nCPU architecture: 8\nCPU variant\t: {v}\nCPU part\t: {p}\nCPU revision\t: 1\n\n"
    return out+tail
def caps(board, values):
    for i,c in enumerate(values):
        w(board,f'sys/devices/system/cpu/cpu{i}/cpu_capacity', f"{c}\n")
def x86cpu(model, cores_map, flags, vendor='GenuineIntel', family=6, modelno=170):
    # cores_map: list of core ids, one per logical processor
    out=''
    n=len(cores_map); ncores=len(set(cores_map))
    for i,cid in enumerate(cores_map):
        out+=(f"processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {modelno}\nmodel name\t: {model}\nstepping\t: 4\n"
              f"cpu MHz\t\t: 2400.000\ncache size\t: 24576 KB\nphysical id\t: 0\nsiblings\t: {n}\ncore id\t\t: {cid}\ncpu cores\t: {ncores}\napicid\t\t: {i}\n"
              f"fpu\t\t: yes\nflags\t\t: {flags}\nbogomips\t: 5990.40\naddress sizes\t: 46 bits physical, 48 bits virtual\n\n")
    return out
for d in os.listdir(T):
    if os.path.isdir(os.path.join(T,d)): shutil.rmtree(os.path.join(T,d))
ORINFEAT=ARMFEAT+' uscat ilrcpc flagm paca pacg'
# Jetson Orin Nano 8GB devkit, JetPack 6.0 (L4T R36.3)
b='jetson-orin-nano'
dt(b,'NVIDIA Jetson Orin Nano Developer Kit',['nvidia,p3768-0000+p3767-0005','nvidia,p3767-0005','nvidia,tegra234'])
w(b,'proc/cpuinfo',armcpu(['0xd42']*6,ORINFEAT))
caps(b,[1024]*6)
meminfo(b,7620332,5894112)
w(b,'etc/nv_tegra_release','# R36 (release), REVISION: 3.0, GCID: 36191598, BOARD: generic, EABI: aarch64, DATE: Mon May  6 17:34:21 UTC 2024\n# KERNEL_VARIANT: oot\nTARGET_USERSPACE_LIB_DIR=nvidia\nTARGET_USERSPACE_LIB_DIR_PATH=usr/lib/aarch64-linux-gnu/nvidia\n')
copysys(b,'jetson-orin-nano')
# Jetson AGX Orin 64GB devkit, JetPack 6
b='jetson-agx-orin'
dt(b,'Jetson AGX Orin Developer Kit',['nvidia,p3737-0000+p3701-0005','nvidia,p3701-0005','nvidia,tegra234'])
w(b,'proc/cpuinfo',armcpu(['0xd42']*12,ORINFEAT))
caps(b,[1024]*12)
meminfo(b,62850464,58712340)
w(b,'etc/nv_tegra_release','# R36 (release), REVISION: 4.0, GCID: 37537400, BOARD: generic, EABI: aarch64, DATE: Fri Sep 13 04:36:44 UTC 2024\n')
copysys(b,'jetson-agx-orin')
w(b,'sys/class/devfreq/17000000.gpu/cur_freq','306000000\n'); w(b,'sys/class/devfreq/17000000.gpu/max_freq','1300500000\n')
# Jetson Xavier NX on JetPack 5 (L4T R35.4.1)
b='jetson-xavier-nx-jp5'
dt(b,'NVIDIA Jetson Xavier NX Developer Kit',['nvidia,p3509-0000+p3668-0001','nvidia,tegra194'])
w(b,'proc/cpuinfo',armcpu(['0x004']*6,ARMFEAT,impl='0x4e'))
meminfo(b,7773260,6001212)
w(b,'etc/nv_tegra_release','# R35 (release), REVISION: 4.1, GCID: 33958178, BOARD: t186ref, EABI: aarch64, DATE: Tue Aug  1 19:57:35 UTC 2023\n')
# a lying tree: the model says Jetson, nothing else does
b='lying-jetson-no-rails'
w(b,'proc/device-tree/model','NVIDIA Jetson Orin Nano Developer Kit\0')
w(b,'proc/device-tree/compatible','linux,dummy-virt\0')
w(b,'proc/cpuinfo',armcpu(['0xd0c']*4))
meminfo(b,4025000,3500000)
# Raspberry Pi 5 Model B 8GB, Raspberry Pi OS bookworm 64-bit
b='rpi5'
dt(b,'Raspberry Pi 5 Model B Rev 1.0',['raspberrypi,5-model-b','brcm,bcm2712'])
w(b,'proc/cpuinfo',armcpu(['0xd0b']*4,ARMFEAT,variants={'0xd0b':'0x4'},tail='Revision\t: d04170\nSerial\t\t: 8a1b2c3d4e5f6a7b\nModel\t\t: Raspberry Pi 5 Model B Rev 1.0\n'))
meminfo(b,8245000,7610000)
copysys(b,'rpi5')
# Raspberry Pi 4 Model B 4GB, 64-bit
b='rpi4'
dt(b,'Raspberry Pi 4 Model B Rev 1.4',['raspberrypi,4-model-b','brcm,bcm2711'])
w(b,'proc/cpuinfo',armcpu(['0xd08']*4,'fp asimd evtstrm crc32 cpuid',variants={'0xd08':'0x0'},tail='Hardware\t: BCM2835\nRevision\t: c03114\nSerial\t\t: 100000001a2b3c4d\nModel\t\t: Raspberry Pi 4 Model B Rev 1.4\n'))
meminfo(b,3882000,3301000)
w(b,'sys/class/thermal/thermal_zone0/type','cpu-thermal\n'); w(b,'sys/class/thermal/thermal_zone0/temp','48686\n')
for f,v in [('scaling_cur_freq','1800000'),('scaling_max_freq','1800000'),('cpuinfo_max_freq','1800000')]:
    w(b,'sys/devices/system/cpu/cpufreq/policy0/'+f, v+'\n')
# Radxa ROCK 5B (RK3588), mainline-ish vendor kernel 6.1
b='rk3588'
dt(b,'Radxa ROCK 5B',['radxa,rock-5b','rockchip,rk3588'])
RKP=['0xd05']*4+['0xd0b']*4
w(b,'proc/cpuinfo',armcpu(RKP,ARMFEAT,variants={'0xd05':'0x2','0xd0b':'0x4'}))
caps(b,[414]*4+[1024]*4)
meminfo(b,16151000,15012000)
copysys(b,'rk3588')
# Orange Pi 5 (RK3588S) whose cpu_capacity is garbage: CPU parts must decide
b='rk3588s-bad-capacity'
dt(b,'Orange Pi 5',['rockchip,rk3588s-orangepi-5','rockchip,rk3588'])
w(b,'proc/cpuinfo',armcpu(RKP,ARMFEAT,variants={'0xd05':'0x2','0xd0b':'0x4'}))
caps(b,['414']*4+['banana']+['1024']*3)
meminfo(b,7933000,7100000)
# an RK3588 tree that lies twice: garbage capacity and no CPU parts
b='lying-rk3588-no-parts'
dt(b,'Rockchip RK3588 EVB',['rockchip,rk3588-evb1-v10','rockchip,rk3588'])
w(b,'proc/cpuinfo',''.join(f"processor\t: {i}\nBogoMIPS\t: 48.00\nFeatures\t: {ARMFEAT}\nCPU architecture: 8\n\n" for i in range(8)))
caps(b,['\xff\xfe\x00junk']*8)
meminfo(b,3900000,3000000)
# Qualcomm RB3 Gen 2 (QCS6490): 4x A55, 3x A78, 1x X1
b='qualcomm-qcs6490'
dt(b,'Qualcomm Technologies, Inc. Robotics RB3gen2',['qcom,qcs6490-rb3gen2','qcom,qcm6490'])
w(b,'proc/cpuinfo',armcpu(['0xd05']*4+['0xd41']*3+['0xd44'],ARMFEAT))
caps(b,[379]*4+[878]*3+[1024])
meminfo(b,5700000,4200000)
w(b,'dev/fastrpc-cdsp','')
w(b,'sys/class/thermal/thermal_zone0/type','cpu0-thermal\n'); w(b,'sys/class/thermal/thermal_zone0/temp','41200\n')
w(b,'sys/class/thermal/thermal_zone12/type','nsp0-thermal\n'); w(b,'sys/class/thermal/thermal_zone12/temp','39800\n')
# Intel Core Ultra 7 155H laptop: 6 P-cores (HT), 8 E-cores, 2 LP E-cores; NPU bound to intel_vpu
b='intel-core-ultra'
INTELF='fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb intel_ppin ssbd ibrs ibpb stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdt_a rdseed adx smap clflushopt clwb intel_pt sha_ni xsaveopt xsavec xgetbv1 xsaves split_lock_detect avx_vnni dtherm ida arat pln pts hwp hwp_notify hwp_act_window hwp_epp hwp_pkg_req hfi vnmi umip pku ospke waitpkg gfni vaes vpclmulqdq rdpid bus_lock_detect movdiri movdir64b fsrm md_clear serialize arch_lbr ibt flush_l1d arch_capabilities'
cores=[0,0,4,4,8,8,12,12,16,16,20,20]+[24,25,26,27,28,29,30,31]+[32,33]
w(b,'proc/cpuinfo',x86cpu('Intel(R) Core(TM) Ultra 7 155H',cores,INTELF))
w(b,'sys/devices/cpu_core/cpus','0-11\n'); w(b,'sys/devices/cpu_atom/cpus','12-21\n')
w(b,'sys/class/dmi/id/sys_vendor','Dell Inc.\n'); w(b,'sys/class/dmi/id/product_name','XPS 16 9640\n'); w(b,'sys/class/dmi/id/board_vendor','Dell Inc.\n'); w(b,'sys/class/dmi/id/board_name','0J1XGR\n')
meminfo(b,32441000,27300000)
copysys(b,'intel-rapl')
os.makedirs(os.path.join(T,b,'sys/class/accel/accel0/device'),exist_ok=True)
os.symlink('../../../../bus/pci/drivers/intel_vpu', os.path.join(T,b,'sys/class/accel/accel0/device/driver'))
# x86 workstation with an RTX 4090 and the 550 driver
b='x86-nvidia'
AMDF='fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd mba ibrs ibpb stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 erms invpcid cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local avx512_bf16 clzero irperf xsaveerptr rdpru wbnoinvd arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif x2avic v_spec_ctrl vnmi avx512vbmi umip pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg avx512_vpopcntdq rdpid overflow_recov succor smca fsrm flush_l1d'
w(b,'proc/cpuinfo',x86cpu('AMD Ryzen 9 7950X 16-Core Processor',[c for c in range(16) for _ in (0,1)],AMDF,vendor='AuthenticAMD',family=25,modelno=97))
w(b,'proc/driver/nvidia/version','NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n')
w(b,'sys/bus/pci/devices/0000:01:00.0/vendor','0x10de\n'); w(b,'sys/bus/pci/devices/0000:01:00.0/class','0x030000\n'); w(b,'sys/bus/pci/devices/0000:01:00.0/device','0x2684\n')
w(b,'sys/bus/pci/devices/0000:00:00.0/vendor','0x1022\n'); w(b,'sys/bus/pci/devices/0000:00:00.0/class','0x060000\n')
w(b,'sys/class/dmi/id/sys_vendor','Micro-Star International Co., Ltd.\n'); w(b,'sys/class/dmi/id/product_name','MS-7D70\n')
meminfo(b,65000000,60100000)
copysys(b,'amd-rapl')
# generic amd64: a 2-vCPU cloud VM like the project's (no sensors, no GPU)
b='generic-amd64'
w(b,'proc/cpuinfo',x86cpu('AMD EPYC 9R14',[0,0],AMDF,vendor='AuthenticAMD',family=25,modelno=17))
w(b,'sys/class/dmi/id/sys_vendor','Amazon EC2\n'); w(b,'sys/class/dmi/id/product_name','m7a.large\n')
meminfo(b,8000000,6500000)
os.makedirs(os.path.join(T,b,'sys/class/thermal'),exist_ok=True); w(b,'sys/class/thermal/.keep','')
# generic arm64: an AWS Graviton3 instance (Neoverse-V1), DMI, no device tree
b='generic-arm64'
w(b,'proc/cpuinfo',armcpu(['0xd40']*4,ARMFEAT+' sve i8mm bf16'))
w(b,'sys/class/dmi/id/sys_vendor','Amazon EC2\n'); w(b,'sys/class/dmi/id/product_name','c7g.xlarge\n')
meminfo(b,7900000,7300000)
# an unknown big.LITTLE board (RK3399: 4x A53 + 2x A72): generic, yet threads on the A72s
b='unknown-rk3399'
dt(b,'Pine64 RockPro64 v2.1',['pine64,rockpro64-v2.1','pine64,rockpro64','rockchip,rk3399'])
w(b,'proc/cpuinfo',armcpu(['0xd03']*4+['0xd08']*2,'fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid'))
caps(b,[485]*4+[1024]*2)
meminfo(b,3970000,3500000)
print('ok')
